// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

// Package resourcemanager delivers objects to a test cluster the way Gardener does on a self-hosted shoot: as a
// ManagedResource (Gardener's managedresources helpers, as gardenlet, gardenadm and networking-cilium call them),
// applied by the managedresource reconciler of Gardener's own resource manager
// (pkg/resourcemanager/controller/managedresource). It stands for gardener-resource-manager, whose reconciler runs here
// unchanged. A test either reconciles explicitly where the real one would on a change or on its sync period, or runs
// the reconciler's own controller (Run), with its watches, predicates and backoff.
package resourcemanager

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1beta1helper "github.com/gardener/gardener/pkg/api/core/v1beta1/helper"
	resourcemanagerconfigv1alpha1 "github.com/gardener/gardener/pkg/apis/config/resourcemanager/v1alpha1"
	gardencorev1beta1 "github.com/gardener/gardener/pkg/apis/core/v1beta1"
	v1beta1constants "github.com/gardener/gardener/pkg/apis/core/v1beta1/constants"
	resourcesv1alpha1 "github.com/gardener/gardener/pkg/apis/resources/v1alpha1"
	"github.com/gardener/gardener/pkg/client/kubernetes"
	reconcilerutils "github.com/gardener/gardener/pkg/controllerutils/reconciler"
	"github.com/gardener/gardener/pkg/resourcemanager/controller/managedresource"
	resourcemanagerpredicate "github.com/gardener/gardener/pkg/resourcemanager/predicate"
	"github.com/gardener/gardener/pkg/utils/managedresources"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/scheme"
)

// ResourceManager is one class of gardener-resource-manager: "seed" applies what gardenlet and gardenadm install
// (extension charts), "" what extensions deliver into the shoot (networking-cilium's chart). On a self-hosted shoot
// both run against the same cluster.
type ResourceManager struct {
	config     *rest.Config
	client     client.Client
	class      string
	reconciler *managedresource.Reconciler
}

// New returns the resource manager of class for the cluster of config.
func New(config *rest.Config, c client.Client, class string) (*ResourceManager, error) {
	m := &ResourceManager{config: config, client: c, class: class}
	var err error
	m.reconciler, err = m.newReconciler()
	return m, err
}

func (m *ResourceManager) newReconciler() (*managedresource.Reconciler, error) {
	httpClient, err := rest.HTTPClientFor(m.config)
	if err != nil {
		return nil, err
	}
	mapper, err := apiutil.NewDynamicRESTMapper(m.config, httpClient)
	if err != nil {
		return nil, err
	}
	rmConfig := resourcemanagerconfigv1alpha1.ManagedResourceControllerConfig{}
	resourcemanagerconfigv1alpha1.SetDefaults_ManagedResourceControllerConfig(&rmConfig)
	return &managedresource.Reconciler{
		SourceClient:                  m.client,
		TargetClient:                  m.client,
		TargetScheme:                  scheme.New(),
		TargetRESTMapper:              mapper,
		Config:                        rmConfig,
		Clock:                         clock.RealClock{},
		ClassFilter:                   resourcemanagerpredicate.NewClassFilter(m.class),
		RequeueAfterOnDeletionPending: new(time.Second),
	}, nil
}

// Run runs the resource manager's managedresource controller (its AddToManager: the watches of ManagedResources and
// their Secrets, the predicates, the operation-annotation wrapper, controller-runtime's exponential backoff) until
// ctx ends, as gardener-resource-manager does.
func (m *ResourceManager) Run(ctx context.Context) error {
	reconciler, err := m.newReconciler()
	if err != nil {
		return err
	}
	mgr, err := manager.New(m.config, manager.Options{
		Scheme:     scheme.New(),
		Metrics:    metricsserver.Options{BindAddress: "0"},
		Controller: config.Controller{SkipNameValidation: new(true)},
	})
	if err != nil {
		return err
	}
	if err := reconciler.AddToManager(mgr, mgr, mgr); err != nil {
		return err
	}
	return mgr.Start(ctx)
}

// Serialize turns objects into the data of a ManagedResource's secret, as Gardener's components do.
func Serialize(objs ...client.Object) (map[string][]byte, error) {
	registry := managedresources.NewRegistry(kubernetes.ShootScheme, kubernetes.ShootCodec, kubernetes.ShootSerializer)
	if err := registry.Add(objs...); err != nil {
		return nil, err
	}
	return registry.SerializedObjects()
}

// DeployForSeed stores data as the ManagedResource namespace/name of class seed (managedresources.CreateForSeed, as
// gardenlet's controllerinstallation reconciler stores an extension's rendered chart) and reconciles it.
func (m *ResourceManager) DeployForSeed(ctx context.Context, namespace, name string, data map[string][]byte) error {
	if err := managedresources.CreateForSeed(ctx, m.client, namespace, name, false, data); err != nil {
		return err
	}
	return m.Reconcile(ctx, namespace, name)
}

// DeployForShoot stores data as the ManagedResource namespace/name for the shoot's resource manager
// (managedresources.CreateForShoot, as networking-cilium stores Cilium's chart) and reconciles it.
func (m *ResourceManager) DeployForShoot(ctx context.Context, namespace, name, origin string, data map[string][]byte) error {
	if err := managedresources.CreateForShoot(ctx, m.client, namespace, name, origin, false, data); err != nil {
		return err
	}
	return m.Reconcile(ctx, namespace, name)
}

// Reconcile runs the resource manager's reconciliation of the ManagedResource namespace/name once, as on a change of
// it or on a resync, and returns its error: an object refused by kube-apiserver fails the reconciliation, and the
// ManagedResource's ResourcesApplied condition says why. As its controller would, it removes a requested operation
// first (Gardener's OperationAnnotationWrapper) and tries again when someone changed the ManagedResource meanwhile (the
// extension requesting a reconcile).
func (m *ResourceManager) Reconcile(ctx context.Context, namespace, name string) error {
	wrapped := reconcilerutils.OperationAnnotationWrapper(clientOf{client: m.client},
		func() client.Object { return &resourcesv1alpha1.ManagedResource{} }, m.reconciler)
	return retry.OnError(retry.DefaultRetry, apierrors.IsConflict, func() error {
		_, err := wrapped.Reconcile(ctx, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: namespace, Name: name}})
		return err
	})
}

// clientOf is the one part of a manager that OperationAnnotationWrapper uses.
type clientOf struct {
	manager.Manager
	client client.Client
}

func (c clientOf) GetClient() client.Client { return c.client }

// Applied returns the ManagedResource's ResourcesApplied condition, nil when it has none.
func (m *ResourceManager) Applied(ctx context.Context, namespace, name string) (*gardencorev1beta1.Condition, error) {
	mr := &resourcesv1alpha1.ManagedResource{}
	if err := m.client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, mr); err != nil {
		return nil, err
	}
	return v1beta1helper.GetCondition(mr.Status.Conditions, resourcesv1alpha1.ResourcesApplied), nil
}

// SeedClass is the class of the resource manager that applies extension charts.
const SeedClass = v1beta1constants.SeedResourceManagerClass
