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

// AddToManagerWithOptions adds the controller to mgr, with the watches that bring a VIP assigned by Cilium into the
// status at once and apply a changed Shoot (its exposure providerConfig, its networking) within seconds.
//
// Gardener's generic reconciler watches only SelfHostedShootExposures and reconciles on its operation annotation, so
// everything that must cause a reconciliation asks for one with that annotation (requestReconcile). Each of the ways
// an exposure waits has a reason of its own:
//   - within a reconciliation, a poll of up to IngressWait for LB-IPAM's VIP and the announcement: gardenadm counts an
//     exposure with a lastError as failed after about 30s, so a VIP that comes within seconds must end up in this
//     reconciliation's status rather than in a later one;
//   - RequeueAfterError when that poll runs out, so that a VIP that never comes keeps being looked for;
//   - the Service trigger: LB-IPAM may assign or change the VIP after the reconciliation has ended (pool edits,
//     LB-IPAM restarted), which no exposure event reports;
//   - the Cluster trigger: gardenadm edits only the Cluster when the Shoot's exposure configuration changes
//     (gardener v1.150 does not copy it into the exposure);
//   - the health trigger: the probers see a kube-apiserver go out or come back, which no API object reports;
//   - the leader trigger: the probers run in the leader and start with a reconciliation, which Gardener's generic
//     reconciler does not do for a succeeded exposure when a new leader starts;
//   - not a wait, but a second cache: the owned objects are listed from metadata informers of their own
//     (ownedObjects), because kube-apiserver answers label-selected lists of a kind whose watch cache is still
//     initialising with 429 and a second's Retry-After, which made every first reconciliation after a start slow.
//
// These triggers are separate controllers because their sources differ (a Service, a Cluster, a channel, the start of
// a term); the Service, health and leader triggers share exposureTrigger, and all of them requestReconcile.
func AddToManagerWithOptions(ctx context.Context, mgr manager.Manager, opts AddOptions) error {
	// Informers the reconciliation reads start with the manager rather than on the first exposure, whose
	// reconciliation would otherwise wait for their initial sync (gardenadm waits for the exposure); for the kinds
	// of Cilium's CRDs, as soon as Cilium has installed them.
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
		Actuator:          NewActuator(mgr.GetClient(), mgr.GetAPIReader(), mgr.GetEventRecorderFor(ControllerName), owned, opts.IngressWait, probes),
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
