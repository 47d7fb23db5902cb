package datapath

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/gardener/gardener-extension-cilium-selfhosted/test/podrun"
)

// TestAgentsReady: every agent, started from the pod the webhook admitted for its node, becomes ready and is then
// connected (by the address pairs of its own sockets) on a control-plane node only to its own node's kube-apiserver
// at localhost, on a worker only to the control-plane node its hostAliases list first, with Gardener's certificate
// verified; nothing on any node reaches the `kubernetes` Service's backend, where the ClusterIP leads.
func TestAgentsReady(t *testing.T) {
	pods := waitForAgents(t)
	for _, name := range slices.Sorted(maps.Keys(nodes)) {
		n := nodes[name]
		allowed := []string{podrun.LocalAPIServer}
		if !n.controlPlane {
			// Go's dialer takes the hosts file's addresses in order. A node whose kube-apiserver a test stopped may
			// have moved the agent to the next one, or the connection may have outlived the outage.
			allowed = nil
			for _, a := range pods[name].Spec.HostAliases {
				allowed = append(allowed, a.IP+":443")
				if !stoppedOnce[nodeByIP(a.IP)] {
					break
				}
			}
		}
		// An agent whose kube-apiserver a test stopped reconnects on its own schedule: wait for it.
		var peers []string
		if err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
			n.mu.Lock()
			all, err := n.agent.Peers()
			n.mu.Unlock()
			// Port 443: every kube-apiserver address (the control-plane nodes, localhost, the ClusterIP, the VIP);
			// the others are the probes and clients of the agent's own servers.
			peers = slices.DeleteFunc(all, func(p string) bool { return !strings.HasSuffix(p, ":443") })
			return len(peers) == 1 && slices.Contains(allowed, peers[0]), err
		}); err != nil {
			t.Errorf("the agent on %s is connected to %v, want one of %v: %v", name, peers, allowed, err)
		}
		if ep, _ := n.sandbox.Endpoint(n.serviceBackend); ep.Count() > 0 {
			t.Errorf("%d connections on %s reached the kubernetes Service's backend %s", ep.Count(), name, n.serviceBackend)
		}
		t.Logf("%s: agent ready, connected to %v", name, peers)
	}
}

func nodeByIP(ip string) string {
	for _, n := range nodes {
		if n.ip == ip {
			return n.name
		}
	}
	return ""
}
