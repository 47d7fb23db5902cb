// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package datapath

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/cilium"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/ciliumnodes"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/podrun"
)

// TestAgentsReady: with each chart (Gardener's, which real shoots get, and upstream's: of the newest line and of
// Gardener's Cilium version), every agent, started from the pod the webhook admitted for its node, becomes ready and
// is then connected (by the address pairs of its own sockets) on a control-plane node only to its own node's
// kube-apiserver at localhost, on a worker only to the control-plane node its hostAliases list first, with Gardener's
// certificate verified. No node ever sent a packet to the ClusterIP or the VIP, and nothing reached the `kubernetes`
// Service's backend, where socket load-balancing leads the ClusterIP.
func TestAgentsReady(t *testing.T) {
	onEachLane(t, func(t *testing.T, l *lane) {
		charts := []ciliumnodes.Chart{l.line}
		if l == gardenerLane {
			// Upstream's chart of Gardener's version too, whose agents the lane's operator serves; the lane's own
			// last, which its next case runs.
			charts = []ciliumnodes.Chart{ciliumnodes.UpstreamChart, l.line}
		}
		for _, chart := range charts {
			t.Run(string(chart), func(t *testing.T) {
				pods, err := l.cluster.Run(context.Background(), ciliumnodes.Agents{Chart: chart})
				if err != nil {
					t.Fatal(err)
				}
				for _, n := range l.cluster.Nodes() {
					assertConnections(t, l.cluster, n, pods[n.Name])
					assertCiliumWroteItsNode(t, l.env.Client, n.Name)
				}
			})
		}
	})
}

// assertCiliumWroteItsNode: cilium-operator has marked the node's network available (operator/watchers
// node_taint.go) and, where cilium-config asks for it (annotate-k8s-node: networking-cilium's chart does, upstream's
// by default not), the node's agent has annotated its Node (pkg/k8s annotate.go, through the status subresource with
// its pod's token): both through the chart's policies on Node writes, which refuse anything else of theirs.
func assertCiliumWroteItsNode(t *testing.T, c client.Client, name string) {
	t.Helper()
	config := &corev1.ConfigMap{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: cilium.Namespace, Name: cilium.ConfigMapName}, config); err != nil {
		t.Fatal(err)
	}
	annotates := config.Data["annotate-k8s-node"] == "true"
	node := &corev1.Node{}
	if err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, client.ObjectKey{Name: name}, node); err != nil {
			return false, err
		}
		annotated := slices.ContainsFunc(slices.Collect(maps.Keys(node.Annotations)), func(k string) bool { return strings.HasPrefix(k, "network.cilium.io/") })
		available := slices.ContainsFunc(node.Status.Conditions, func(c corev1.NodeCondition) bool {
			return c.Type == corev1.NodeNetworkUnavailable && c.Status == corev1.ConditionFalse && c.Reason == "CiliumIsUp"
		})
		return (annotated || !annotates) && available, nil
	}); err != nil {
		t.Errorf("Node %s: annotations %v, conditions %v, want the operator's NetworkUnavailable False and, with annotate-k8s-node %t, the agent's network.cilium.io/ annotations: %v", name, node.Annotations, node.Status.Conditions, annotates, err)
	}
}

func assertConnections(t *testing.T, c *ciliumnodes.Cluster, n *ciliumnodes.Node, pod *corev1.Pod) {
	t.Helper()
	allowed := []string{podrun.LocalAPIServer}
	if !n.ControlPlane {
		// Go's dialer takes the hosts file's addresses in order. A node whose kube-apiserver a test stopped may have
		// moved the agent to the next one, or the connection may have outlived the outage.
		allowed = nil
		for _, a := range pod.Spec.HostAliases {
			allowed = append(allowed, a.IP+":443")
			node := c.NodeByIP(a.IP)
			if node == nil {
				t.Fatalf("the agent pod of %s is pinned to %s, no node's address: %v", n.Name, a.IP, pod.Spec.HostAliases)
			}
			if !c.Disturbed(node.Name) {
				break
			}
		}
	}
	// An agent whose kube-apiserver a test stopped reconnects on its own schedule: wait for it.
	var peers []string
	if err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		var err error
		peers, err = n.APIServerPeers()
		return len(peers) == 1 && slices.Contains(allowed, peers[0]), err
	}); err != nil {
		t.Errorf("the agent on %s is connected to %v, want one of %v: %v", n.Name, peers, allowed, err)
	}
	if hits := n.ServiceBackendHits(); hits > 0 {
		t.Errorf("%d connections on %s reached the kubernetes Service's backend", hits, n.Name)
	}
	attempts, err := n.Attempts()
	if err != nil {
		t.Fatal(err)
	}
	for addr, count := range attempts {
		if count > 0 {
			t.Errorf("%s sent %d packets to %s", n.Name, count, addr)
		}
	}
	t.Logf("%s: agent ready, connected to %v; packets to %v", n.Name, peers, attempts)
}

// TestBlackHoledControlPlaneNode: the control-plane node that a worker's agent is connected to dies without refusing
// anything (its link goes down, or it drops every packet), while the connection is established. client-go's HTTP/2
// health check, as the webhook tightens it (4 s without a frame, then a ping answered within 4 s), closes the dead
// connection, and the agent dials the next control-plane node of its hostAliases, each address getting a third of the
// 6 s dial timeout the webhook sets. The node dies right after a frame reached the agent, and the wait ends before
// client-go's defaults (30 s without a frame + 15 s) or Cilium's heartbeat (a 30 s request) could have closed the
// connection at all, so a pass shows the tightened check at work; the same run with the defaults shows the agent still
// on the dead connection after that bound. The times are logged (`make bench` measures them). On the newest line's lane,
// which has the shorter cases.
func TestBlackHoledControlPlaneNode(t *testing.T) {
	const bound = 30 * time.Second
	l := newestLane
	l.hold(t)
	for _, tc := range []struct {
		death    ciliumnodes.Death
		defaults bool
	}{{ciliumnodes.LinkDown, false}, {ciliumnodes.Hung, false}, {ciliumnodes.LinkDown, true}} {
		name := string(tc.death)
		if tc.defaults {
			name += ", client-go's and Cilium's defaults"
		}
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			want := ciliumnodes.Agents{}
			if tc.defaults {
				// Only the worker's agent, whose connection dies.
				want.ClientDefaults = []string{ciliumnodes.Worker}
			}
			if err := l.run(ctx, want); err != nil {
				t.Fatal(err)
			}
			r, err := l.cluster.Reconnects().BlackHole(ctx, ciliumnodes.Worker, tc.death, bound)
			if tc.defaults {
				if err == nil {
					t.Fatalf("with the defaults, the agent left dead %s for %s after %s, before client-go's health check could have closed the connection; the agent's log:\n%s",
						r.From, r.To, r.After, l.cluster.Node(ciliumnodes.Worker).LogTail())
				}
				// It does get over it, once the defaults close the connection.
				r, err = l.cluster.Reconnects().WaitForReconnect(ctx, r, 2*time.Minute)
			}
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s died (%s): the agent on %s was connected to %s after %s", r.From, name, r.Worker, r.To, r.After.Round(100*time.Millisecond))
		})
	}
}

// TestConnectionEndsWithNodeUp: the connection of a worker's agent to kube-apiserver ends while its control-plane node
// stays up. When that kube-apiserver stops (its connections closed, its port refusing), the agent is connected to
// another control-plane node; when only the connection is reset, it connects again. Both within a bound shorter than
// client-go's HTTP/2 health check (45 s), which only a dead peer needs; the times are logged (`make bench` measures
// them, also with client-go's and Cilium's defaults). On the newest line's lane.
func TestConnectionEndsWithNodeUp(t *testing.T) {
	const bound = 30 * time.Second
	l := newestLane
	l.hold(t)
	for _, how := range []ciliumnodes.Disconnection{ciliumnodes.APIServerStopped, ciliumnodes.ConnectionReset} {
		t.Run(string(how), func(t *testing.T) {
			ctx := context.Background()
			if err := l.run(ctx, ciliumnodes.Agents{}); err != nil {
				t.Fatal(err)
			}
			r, err := l.cluster.Reconnects().Disconnect(ctx, ciliumnodes.Worker, how, bound)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s (%s): the agent on %s was connected to %s after %s", r.From, how, r.Worker, r.To, r.After.Round(10*time.Millisecond))
		})
	}
}
