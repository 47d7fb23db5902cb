// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package datapath

import (
	"context"
	"strconv"
	"testing"
	"time"

	ciliumv2 "github.com/cilium/cilium/pkg/k8s/apis/cilium.io/v2"
	"github.com/cilium/cilium/pkg/policy/api"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/ciliumnodes"
)

// TestNetworkPolicyAcrossNodes: pods made as kubelet and containerd make them (their Pod objects, network namespaces,
// Cilium's CNI plugin's ADD) on a control-plane node and a worker get addresses from their nodes' pod CIDRs and, once
// their endpoints carry the identities of their labels, reach each other through Cilium's datapath: both client pods
// on the worker connect to the server pod on the control-plane node. Then a NetworkPolicy lets one of them in and not
// the other: under it the one connects and the other's connection is dropped (it times out, nothing refuses it).
func TestNetworkPolicyAcrossNodes(t *testing.T) {
	onEachLane(t, func(t *testing.T, l *lane) {
		server := startPod(t, l, "cp-0", "policy-server", map[string]string{"app": "policy-server"})
		allowed := startPod(t, l, "worker-0", "policy-allowed", map[string]string{"role": "allowed"})
		denied := startPod(t, l, "worker-0", "policy-denied", map[string]string{"role": "denied"})
		enforcedAcrossNodes(t, l, server, allowed, denied, &networkingv1.NetworkPolicy{
			ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: "policy-server"},
			Spec:       ciliumnodes.PolicyAllowing(server.Pod.Labels, allowed.Pod.Labels),
		})
	})
}

// TestCiliumNetworkPolicyAcrossNodes: the mirror of TestNetworkPolicyAcrossNodes with Cilium's own policy: a
// CiliumNetworkPolicy lets a client pod on one control-plane node reach a server pod on the worker and keeps a client
// on another out; both connect before it, and under it the one connects and the other's connection is dropped.
func TestCiliumNetworkPolicyAcrossNodes(t *testing.T) {
	onEachLane(t, func(t *testing.T, l *lane) {
		server := startPod(t, l, "worker-0", "cnp-server", map[string]string{"app": "cnp-server"})
		allowed := startPod(t, l, "cp-0", "cnp-allowed", map[string]string{"role": "cnp-allowed"})
		denied := startPod(t, l, "cp-1", "cnp-denied", map[string]string{"role": "cnp-denied"})
		enforcedAcrossNodes(t, l, server, allowed, denied, &ciliumv2.CiliumNetworkPolicy{
			ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: "cnp-server"},
			Spec: &api.Rule{
				EndpointSelector: api.NewESFromMatchRequirements(server.Pod.Labels, nil),
				Ingress: []api.IngressRule{{
					IngressCommonRule: api.IngressCommonRule{
						FromEndpoints: []api.EndpointSelector{api.NewESFromMatchRequirements(allowed.Pod.Labels, nil)},
					},
					ToPorts: api.PortRules{{Ports: []api.PortProtocol{{Port: strconv.Itoa(ciliumnodes.PolicyPort), Protocol: api.ProtoTCP}}}},
				}},
			},
		})
	})
}

// enforcedAcrossNodes serves on server and checks that both clients connect to it before policy, which lets allowed
// in and keeps denied out, and that under it the one connects and the other's connection is dropped.
func enforcedAcrossNodes(t *testing.T, l *lane, server, allowed, denied *ciliumnodes.WorkloadPod, policy client.Object) {
	t.Helper()
	ctx := context.Background()
	serve(t, server)
	// Without the policy both connect: what the policy drops, it drops.
	for _, c := range []*ciliumnodes.WorkloadPod{allowed, denied} {
		if err := c.Dial(server, ciliumnodes.PolicyPort, 20*time.Second); err != nil {
			t.Fatalf("before the policy, from %s: %v", c.Pod.Name, err)
		}
	}
	if err := l.env.Client.Create(ctx, policy); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.env.Client.Delete(context.Background(), policy) })
	if _, err := ciliumnodes.WaitEnforced(ctx, server, allowed, denied, time.Minute); err != nil {
		t.Errorf("under the policy: %v", err)
	}
}

// startPod starts a pod named name with labels on node, stopped when the test ends, and waits until its endpoint
// carries the identity of its labels.
func startPod(t *testing.T, l *lane, node, name string, labels map[string]string) *ciliumnodes.WorkloadPod {
	t.Helper()
	p, err := l.cluster.StartWorkloadPod(context.Background(), node, name, labels, true)
	if p != nil {
		t.Cleanup(func() {
			if err := p.Stop(context.Background(), l.env); err != nil {
				t.Error(err)
			}
		})
		t.Logf("pod %s on %s at %s", name, node, p.IP)
	}
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// serve answers on the pod's address and ciliumnodes.PolicyPort until the test ends.
func serve(t *testing.T, p *ciliumnodes.WorkloadPod) {
	t.Helper()
	stop, err := p.Serve(ciliumnodes.PolicyPort)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
}
