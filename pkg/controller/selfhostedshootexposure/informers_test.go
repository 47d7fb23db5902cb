// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package selfhostedshootexposure

import (
	"context"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/scheme"
)

// listingCache is a cache that only lists, from a fake client, and whose informers have synced or not.
type listingCache struct {
	cache.Cache
	reader client.Reader
	synced *bool
}

func (c listingCache) GetInformer(context.Context, client.Object, ...cache.InformerGetOption) (cache.Informer, error) {
	return syncedInformer{synced: *c.synced}, nil
}

type syncedInformer struct {
	cache.Informer
	synced bool
}

func (i syncedInformer) HasSynced() bool { return i.synced }

func (c listingCache) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	return c.reader.List(ctx, list, opts...)
}

func slice(name, namespace string) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}}
}

func TestOwnedObjectsListFromTheInformerOnceSynced(t *testing.T) {
	s := scheme.New()
	fromCache := fake.NewClientBuilder().WithScheme(s).WithObjects(slice("cached", "kube-system")).Build()
	fromAPI := fake.NewClientBuilder().WithScheme(s).WithObjects(slice("api", "kube-system"), slice("api", "other")).Build()
	synced := false
	o := &ownedObjects{cache: listingCache{reader: fromCache, synced: &synced}, reader: fromAPI}
	gvk := discoveryv1.SchemeGroupVersion.WithKind("EndpointSlice")

	names := func(namespace string) []string {
		t.Helper()
		list := &metav1.PartialObjectMetadataList{}
		list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		if err := o.List(context.Background(), list, client.InNamespace(namespace)); err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, item := range list.Items {
			out = append(out, item.Namespace+"/"+item.Name)
		}
		return out
	}

	if got := names("kube-system"); len(got) != 1 || got[0] != "kube-system/api" {
		t.Errorf("before the informer synced: %v, want kube-system/api from kube-apiserver", got)
	}
	synced = true
	if got := names("kube-system"); len(got) != 1 || got[0] != "kube-system/cached" {
		t.Errorf("after the informer synced: %v, want kube-system/cached from the informer", got)
	}
	// The informers watch kube-system only.
	if got := names("other"); len(got) != 1 || got[0] != "other/api" {
		t.Errorf("another namespace: %v, want other/api from kube-apiserver", got)
	}
}
