// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package selfhostedshootexposure

import (
	"context"
	"fmt"
	"strings"
	"time"

	ciliumv2 "github.com/cilium/cilium/pkg/k8s/apis/cilium.io/v2"
	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/cilium"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/exposure/resources"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/identity"
)

// ownedObjects lists what exposures own from metadata informers of the objects labelled as this extension's, not from
// kube-apiserver, whose label-selected lists of a kind with an initialising watch cache wait a second (KEP-4568,
// docs/development/exposure-controller.md); a kind whose informer has not synced yet is listed from kube-apiserver.
type ownedObjects struct {
	cache  cache.Cache
	reader client.Reader
}

func newOwnedObjects(mgr manager.Manager) (*ownedObjects, error) {
	c, err := cache.New(mgr.GetConfig(), cache.Options{
		HTTPClient: mgr.GetHTTPClient(),
		Scheme:     mgr.GetScheme(),
		Mapper:     mgr.GetRESTMapper(),
		// The chart grants EndpointSlices in kube-system only; the Cilium kinds are cluster-scoped.
		DefaultNamespaces:    map[string]cache.Config{cilium.Namespace: {}},
		DefaultLabelSelector: labels.SelectorFromSet(labels.Set{identity.LabelManagedBy: identity.Name}),
		DefaultTransform:     cache.TransformStripManagedFields(),
	})
	if err != nil {
		return nil, fmt.Errorf("creating the cache of owned objects: %w", err)
	}
	return &ownedObjects{cache: c, reader: mgr.GetAPIReader()}, nil
}

// List lists objects of list's kind (a PartialObjectMetadataList) from its informer once that has synced, else from
// kube-apiserver.
func (o *ownedObjects) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	listOpts := (&client.ListOptions{}).ApplyOptions(opts)
	if listOpts.Namespace != "" && listOpts.Namespace != cilium.Namespace {
		return o.reader.List(ctx, list, opts...)
	}
	obj := &metav1.PartialObjectMetadata{}
	obj.SetGroupVersionKind(list.GetObjectKind().GroupVersionKind())
	obj.Kind = strings.TrimSuffix(obj.Kind, "List")
	// Does not wait: an informer that has not synced is not asked. One the starter has not created yet is created
	// here and starts with the cache, as the starter's would.
	informer, err := o.cache.GetInformer(ctx, obj, cache.BlockUntilSynced(false))
	if err != nil || !informer.HasSynced() {
		return o.reader.List(ctx, list, opts...)
	}
	return o.cache.List(ctx, list, opts...)
}

// informerStarter starts the informers a reconciliation reads once kube-apiserver serves their kinds. The extension
// starts before Cilium, whose CRDs come with it: requiring them at start would keep the webhook that Cilium's own
// start depends on from coming up.
type informerStarter struct {
	log    logr.Logger
	scheme *runtime.Scheme
	cache  cache.Cache
	mapper meta.RESTMapper
	owned  *ownedObjects
	// interval is how often kinds not yet served are looked for again.
	interval time.Duration
}

// typedInformers are the kinds the reconciliation reads through the manager's cache.
var typedInformers = []client.Object{&ciliumv2.CiliumLoadBalancerIPPool{}}

// Start starts each informer as soon as its kind is served, and runs the owned objects' cache as long as the
// manager runs.
func (s *informerStarter) Start(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cacheDone := make(chan error, 1)
	go func() { cacheDone <- s.owned.cache.Start(ctx) }()

	pending := map[schema.GroupVersionKind]func(context.Context) error{}
	for _, obj := range typedInformers {
		gvk, err := apiutil.GVKForObject(obj, s.scheme)
		if err != nil {
			return err
		}
		pending[gvk] = func(ctx context.Context) error {
			_, err := s.cache.GetInformer(ctx, obj)
			return err
		}
	}
	for _, kind := range resources.OwnedKinds {
		gvk := kind.GroupVersionKind
		pending[gvk] = func(ctx context.Context) error {
			obj := &metav1.PartialObjectMetadata{}
			obj.SetGroupVersionKind(gvk)
			_, err := s.owned.cache.GetInformer(ctx, obj)
			return err
		}
	}

	waitingFor := map[schema.GroupVersionKind]bool{}
	err := wait.PollUntilContextCancel(ctx, s.interval, true, func(ctx context.Context) (bool, error) {
		select {
		case err := <-cacheDone:
			return false, fmt.Errorf("the cache of owned objects stopped: %w", err)
		default:
		}
		for gvk, start := range pending {
			if _, err := s.mapper.RESTMapping(gvk.GroupKind(), gvk.Version); err != nil {
				if meta.IsNoMatchError(err) && !waitingFor[gvk] {
					waitingFor[gvk] = true
					s.log.Info("Kind not served yet, its informer starts once it is (Cilium installs its CRDs)", "kind", gvk.String())
				} else if !meta.IsNoMatchError(err) {
					s.log.Error(err, "Cannot look up the kind", "kind", gvk.String())
				}
				continue
			}
			// GetInformer waits until the informer has synced; an informer that cannot sync (no RBAC) keeps trying
			// in the background, and is waited for again on the next round.
			startCtx, cancel := context.WithTimeout(ctx, time.Minute)
			err := start(startCtx)
			cancel()
			if err != nil {
				s.log.Error(err, "Informer has not synced yet", "kind", gvk.String())
				continue
			}
			if waitingFor[gvk] {
				s.log.Info("Kind served now, informer started", "kind", gvk.String())
			}
			delete(pending, gvk)
		}
		return len(pending) == 0, nil
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil // stopping
		}
		return err
	}
	s.log.Info("Informers of the exposure's kinds synced")
	// The owned objects' cache runs as long as the manager.
	select {
	case <-ctx.Done():
		return nil
	case err := <-cacheDone:
		return err
	}
}
