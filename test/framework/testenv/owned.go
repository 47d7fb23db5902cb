// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package testenv

import (
	"context"
	"maps"
	"strings"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/exposure/resources"
)

// Owned counts the objects of the exposure namespace/name by kind, over every kind an exposure may own; kinds without
// objects are left out. It lists without a label filter and counts an object that carries the exposure's labels or
// that is named as the exposure names its objects, so that an object that lost its labels, and that the extension's
// label-selected cleanup would therefore miss, still counts.
func (e *Env) Owned(ctx context.Context, namespace, name string) (map[string]int, error) {
	counts := map[string]int{}
	own := labels.SelectorFromSet(resources.Labels(name, namespace))
	for _, kind := range resources.OwnedKinds {
		list := &metav1.PartialObjectMetadataList{}
		list.SetGroupVersionKind(kind.GroupVersion().WithKind(kind.Kind + "List"))
		var opts []client.ListOption
		if kind.Namespaced {
			opts = append(opts, client.InNamespace(namespace))
		}
		if err := e.Client.List(ctx, list, opts...); err != nil {
			return nil, err
		}
		for _, obj := range list.Items {
			if own.Matches(labels.Set(obj.Labels)) || namedAsOwned(kind.Kind, obj.ObjectMeta, namespace, name) {
				counts[kind.Kind]++
			}
		}
	}
	maps.DeleteFunc(counts, func(_ string, n int) bool { return n == 0 })
	return counts, nil
}

// namedAsOwned tells whether obj has a name that the exposure namespace/name gives its objects of kind: the Service's
// name, the slices of that Service, the cluster-scoped name, and the cluster-scoped name with a peer for BGP peers.
func namedAsOwned(kind string, obj metav1.ObjectMeta, namespace, name string) bool {
	service, clusterScoped := resources.ServiceName(name), resources.ClusterScopedName(namespace, name)
	switch kind {
	case "Service":
		return obj.Name == service
	case "EndpointSlice":
		return obj.Labels[discoveryv1.LabelServiceName] == service || strings.HasPrefix(obj.Name, service+"-ipv")
	case "CiliumBGPPeerConfig":
		return strings.HasPrefix(obj.Name, clusterScoped+"-")
	}
	return obj.Name == clusterScoped
}
