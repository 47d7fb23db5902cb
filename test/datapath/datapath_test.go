package datapath

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/gardener/gardener-extension-cilium-selfhosted/test/ciliumnodes"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/podrun"
)

// TestAgentsReady: with each chart (Gardener's, which real shoots get, then upstream's of the same Cilium version),
// every agent, started
// from the pod the webhook admitted for its node, becomes ready and is then connected (by the address pairs of its
// own sockets) on a control-plane node only to its own node's kube-apiserver at localhost, on a worker only to the
// control-plane node its hostAliases list first, with Gardener's certificate verified. No node ever sent a packet to
// the ClusterIP or the VIP, and nothing reached the `kubernetes` Service's backend, where socket load-balancing leads
// the ClusterIP.
func TestAgentsReady(t *testing.T) {
	for _, chart := range []ciliumnodes.Chart{ciliumnodes.GardenerChart, ciliumnodes.UpstreamChart} {
		t.Run(string(chart), func(t *testing.T) {
			pods, err := cluster.Run(context.Background(), ciliumnodes.Agents{Chart: chart})
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range cluster.Nodes() {
				assertConnections(t, n, pods[n.Name])
			}
		})
	}
}

func assertConnections(t *testing.T, n *ciliumnodes.Node, pod *corev1.Pod) {
	t.Helper()
	allowed := []string{podrun.LocalAPIServer}
	if !n.ControlPlane {
		// Go's dialer takes the hosts file's addresses in order. A node whose kube-apiserver a test stopped may have
		// moved the agent to the next one, or the connection may have outlived the outage.
		allowed = nil
		for _, a := range pod.Spec.HostAliases {
			allowed = append(allowed, a.IP+":443")
			if !cluster.Disturbed(cluster.NodeByIP(a.IP).Name) {
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
