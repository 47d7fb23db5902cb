// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package resources

import (
	ciliumv2 "github.com/cilium/cilium/pkg/k8s/apis/cilium.io/v2"
	ciliumv2alpha1 "github.com/cilium/cilium/pkg/k8s/apis/cilium.io/v2alpha1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// OwnedKind is a kind of object that an exposure may own.
type OwnedKind struct {
	schema.GroupVersionKind
	// Namespaced: its objects are in the exposure's namespace; those of the other kinds are cluster-scoped.
	Namespaced bool
}

// OwnedKinds are all kinds an exposure may own, the one list that must stay in sync with Build: the actuator sweeps
// them, its informers watch them, the tests look for leftovers of every one, and a test checks the chart's RBAC
// against them.
var OwnedKinds = []OwnedKind{
	{corev1.SchemeGroupVersion.WithKind("Service"), true},
	{discoveryv1.SchemeGroupVersion.WithKind("EndpointSlice"), true},
	{ciliumv2.SchemeGroupVersion.WithKind(ciliumv2.PoolKindDefinition), false},
	{ciliumv2alpha1.SchemeGroupVersion.WithKind(ciliumv2alpha1.L2AnnouncementKindDefinition), false},
	{ciliumv2.SchemeGroupVersion.WithKind(ciliumv2.BGPAKindDefinition), false},
	{ciliumv2.SchemeGroupVersion.WithKind(ciliumv2.BGPCCKindDefinition), false},
	{ciliumv2.SchemeGroupVersion.WithKind(ciliumv2.BGPPCKindDefinition), false},
}
