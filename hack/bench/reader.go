// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"reflect"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// cacheReads answers the webhooks' reads as the extension's informer cache does, with a deep copy of the stored
// object. controller-runtime's fake client round-trips every read through JSON instead: a webhook that reads the
// pod's Node would pay that on every admission in the bench (about 7% of its CPU), but never in production.
type cacheReads struct {
	client.Client // writes; the webhooks make none
	scheme        *runtime.Scheme
	objects       map[schema.GroupVersionKind][]client.Object
}

func newCacheReads(c client.Client, s *runtime.Scheme, objs []client.Object) (*cacheReads, error) {
	r := &cacheReads{Client: c, scheme: s, objects: map[schema.GroupVersionKind][]client.Object{}}
	for _, obj := range objs {
		gvk, err := apiutil.GVKForObject(obj, s)
		if err != nil {
			return nil, err
		}
		r.objects[gvk] = append(r.objects[gvk], obj.DeepCopyObject().(client.Object))
	}
	return r, nil
}

func (r *cacheReads) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	gvk, err := apiutil.GVKForObject(obj, r.scheme)
	if err != nil {
		return err
	}
	for _, stored := range r.objects[gvk] {
		if stored.GetNamespace() == key.Namespace && stored.GetName() == key.Name {
			reflect.ValueOf(obj).Elem().Set(reflect.ValueOf(stored.DeepCopyObject()).Elem())
			return nil
		}
	}
	return apierrors.NewNotFound(schema.GroupResource{Group: gvk.Group, Resource: strings.ToLower(gvk.Kind)}, key.Name)
}

func (r *cacheReads) List(_ context.Context, list client.ObjectList, opts ...client.ListOption) error {
	gvk, err := apiutil.GVKForObject(list, r.scheme)
	if err != nil {
		return err
	}
	gvk.Kind = strings.TrimSuffix(gvk.Kind, "List")
	o := (&client.ListOptions{}).ApplyOptions(opts)
	var items []runtime.Object
	for _, stored := range r.objects[gvk] {
		if o.Namespace != "" && stored.GetNamespace() != o.Namespace {
			continue
		}
		if o.LabelSelector != nil && !o.LabelSelector.Matches(labels.Set(stored.GetLabels())) {
			continue
		}
		items = append(items, stored.DeepCopyObject())
	}
	return meta.SetList(list, items)
}
