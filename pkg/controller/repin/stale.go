// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package repin

import (
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/apiserverendpoints"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/cilium"
)

// Pinning is how a Cilium pod reaches kube-apiserver compared with the current control-plane members, judged by data
// only (what the webhook wrote into the pod and the Nodes), never by reachability, which a partition fakes.
type Pinning string

const (
	// Current: the pod reaches a current member first: its own node's kube-apiserver (localhost on a control-plane
	// node that still is one) or, off the control plane, a first alias that is a member.
	Current Pinning = "current"
	// Stranded: none of the addresses the pod was admitted with is a member any more (every control-plane node
	// replaced, or its own node no longer one): it cannot reach kube-apiserver until it is recreated.
	Stranded Pinning = "stranded"
	// Degraded: its first address is no member, later ones are: it fails over on every new connection, paying a dial
	// to the dead address first.
	Degraded Pinning = "degraded"
	// Unpinned: admitted while the webhook did not answer, with its template's values: the endpoints ConfigMap's
	// kubeconfig (the agent dials that one server) and no localhost on a control-plane node.
	Unpinned Pinning = "unpinned"
	// Misplaced: on a control-plane node, pinned as a pod off the control plane is (admitted by a webhook replica
	// whose view did not know the node as one yet): it depends on the other nodes' kube-apiservers instead of its own
	// at localhost, and an announcing agent so pinned keeps renewing the L2 lease while its own kube-apiserver is down.
	Misplaced Pinning = "misplaced"
)

// Pinnings are all pinnings, Current first.
var Pinnings = []Pinning{Current, Stranded, Degraded, Unpinned, Misplaced}

// Classify tells the pinning of pod against the control-plane members: their addresses and the names of the
// control-plane Nodes.
func Classify(pod *corev1.Pod, members apiserverendpoints.ControlPlane, controlPlaneNodes sets.Set[string]) Pinning {
	switch host := serviceHost(pod); host {
	case apiserverendpoints.LocalHost:
		if controlPlaneNodes.Has(pod.Spec.NodeName) {
			return Current
		}
		return Stranded
	case apiserverendpoints.ServerName:
		aliases := aliasesOf(pod)
		switch {
		case len(aliases) == 0 || !slices.ContainsFunc(aliases, members.Has):
			return Stranded
		case controlPlaneNodes.Has(pod.Spec.NodeName):
			return Misplaced
		case !members.Has(aliases[0]):
			return Degraded
		default:
			return Current
		}
	default:
		return Unpinned
	}
}

// serviceHost is the KUBERNETES_SERVICE_HOST the webhook set in the pod's containers that talk to kube-apiserver (the
// same in all of them), "" if it set none.
func serviceHost(pod *corev1.Pod) string {
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		if !cilium.TalksToAPIServer(c) {
			continue
		}
		for _, e := range c.Env {
			if e.Name == cilium.EnvServiceHost && e.ValueFrom == nil {
				return e.Value
			}
		}
	}
	return ""
}

// aliasesOf are the addresses the pod's hosts file gives the server name, in kubelet's (and the resolver's) order.
func aliasesOf(pod *corev1.Pod) []netip.Addr {
	var addrs []netip.Addr
	for _, a := range pod.Spec.HostAliases {
		if !slices.Contains(a.Hostnames, apiserverendpoints.ServerName) {
			continue
		}
		if addr, err := netip.ParseAddr(a.IP); err == nil {
			addrs = append(addrs, addr.Unmap())
		}
	}
	return addrs
}
