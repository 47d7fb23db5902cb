// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

// Package selfhostedshootexposure is the controller of SelfHostedShootExposures of type cilium: it exposes
// kube-apiserver on a VIP that Cilium assigns (LB-IPAM) and announces (L2 or BGP), and reports it in status.ingress.
package selfhostedshootexposure

import (
	"context"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/util/sets"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	extensionsselfhostedshootexposure "github.com/gardener/gardener/extensions/pkg/controller/selfhostedshootexposure"
	extensionsv1alpha1 "github.com/gardener/gardener/pkg/apis/extensions/v1alpha1"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/exposure/config"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/exposure/health"
)

// Type is the exposure type this controller serves.
const Type = config.Type

// ControllerName is the name of the controller and of its switch.
const ControllerName = extensionsselfhostedshootexposure.ControllerName

var (
	// DefaultAddOptions are the options of AddToManager.
	DefaultAddOptions = AddOptions{IngressWait: 10 * time.Second, Probes: health.DefaultSettings}

	supportedExtensionClasses = sets.New(extensionsv1alpha1.ExtensionClassShoot)
)

// AddOptions are the options of the controller.
type AddOptions struct {
	// Controller are the controller.Options.
	Controller controller.Options
	// IgnoreOperationAnnotation reconciles on every change rather than on Gardener's operation annotation.
	IgnoreOperationAnnotation bool
	// ExtensionClasses are the extension classes of this deployment; only `shoot` is served.
	ExtensionClasses []extensionsv1alpha1.ExtensionClass
	// IngressWait is how long one reconciliation waits for Cilium to assign the VIP before it requeues.
	IngressWait time.Duration
	// Probes are how the kube-apiservers behind the endpoints are probed.
	Probes health.Settings
}

// AddToManagerWithOptions adds the controller to mgr on Gardener's generic reconciler, with the triggers that ask it
// for a reconciliation when a VIP is assigned, the Shoot changes, an endpoint's readiness changes or a leader term
// starts (docs/development/exposure-controller.md).
func AddToManagerWithOptions(ctx context.Context, mgr manager.Manager, opts AddOptions) error {
	// Informers the reconciliation reads start with the manager, Cilium's kinds once its CRDs are served.
	owned, err := newOwnedObjects(mgr)
	if err != nil {
		return err
	}
	if err := mgr.Add(&informerStarter{
		log:    mgr.GetLogger().WithName(ControllerName).WithName("informers"),
		scheme: mgr.GetScheme(), cache: mgr.GetCache(), mapper: mgr.GetRESTMapper(), owned: owned,
		interval: 5 * time.Second,
	}); err != nil {
		return err
	}
	if _, err := mgr.GetCache().GetInformer(ctx, &extensionsv1alpha1.Cluster{}); err != nil {
		return err
	}
	classes := slices.DeleteFunc(slices.Clone(opts.ExtensionClasses), func(class extensionsv1alpha1.ExtensionClass) bool {
		return !supportedExtensionClasses.Has(class)
	})
	// The probers report changes of an endpoint's readiness here; the health trigger turns them into reconciliations.
	changes := make(chan event.GenericEvent, 64)
	probes, err := health.NewRegistry(mgr.GetConfig(), health.PurposeEndpoints, opts.Probes, enqueue(changes))
	if err != nil {
		return err
	}
	if err := mgr.Add(probes); err != nil {
		return err
	}
	if err := extensionsselfhostedshootexposure.Add(mgr, extensionsselfhostedshootexposure.AddArgs{
		Actuator:          NewActuator(mgr.GetClient(), mgr.GetAPIReader(), mgr.GetEventRecorder(ControllerName), owned, opts.IngressWait, probes),
		ControllerOptions: opts.Controller,
		Predicates:        extensionsselfhostedshootexposure.DefaultPredicates(opts.IgnoreOperationAnnotation),
		Type:              Type,
		ExtensionClasses:  classes,
	}); err != nil {
		return err
	}
	if err := addServiceTrigger(mgr); err != nil {
		return err
	}
	if err := addHealthTrigger(mgr, changes); err != nil {
		return err
	}
	if err := addLeaderTrigger(mgr); err != nil {
		return err
	}
	return addClusterTrigger(mgr)
}

// AddToManager adds the controller with DefaultAddOptions.
func AddToManager(ctx context.Context, mgr manager.Manager) error {
	return AddToManagerWithOptions(ctx, mgr, DefaultAddOptions)
}
