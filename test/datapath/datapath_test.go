package datapath

import (
	"context"
	"maps"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/gardener/gardener-extension-cilium-selfhosted/test/podrun"
)

// TestAgentsReady: every agent, started from the pod the webhook admitted for its node, becomes ready: on a
// control-plane node through its own node's kube-apiserver at localhost, on a worker through the control-plane node
// its hostAliases list first, with Gardener's certificate verified; none reaches the `kubernetes` Service's backend.
func TestAgentsReady(t *testing.T) {
	ctx := context.Background()
	pods, err := startAgents(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range slices.Sorted(maps.Keys(nodes)) {
		n := nodes[name]
		if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 5*time.Minute, true, n.ready); err != nil {
			n.mu.Lock()
			log := n.agent.LogTail(40)
			n.mu.Unlock()
			t.Fatalf("the agent on %s did not become ready: %v\n%s", name, err, log)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(nodes)) {
		n := nodes[name]
		want := name + " " + podrun.LocalAPIServer
		if !n.controlPlane {
			want = nodeByIP(pods[name].Spec.HostAliases[0].IP) + " " + pods[name].Spec.HostAliases[0].IP + ":443"
		}
		got := n.reached()
		if len(got) != 1 || got[want] == 0 {
			t.Errorf("the agent on %s connected to %v, want only %s", name, got, want)
		}
		t.Logf("%s: agent ready, connected to %v", name, got)
	}
}

// reached counts the connections from n to every endpoint of every node, by "<node> <address>": a connection from n's
// InternalIP, or on n itself from loopback.
func (n *node) reached() map[string]int {
	out := map[string]int{}
	for _, other := range nodes {
		for addr, ep := range other.sandbox.Endpoints() {
			from := ep.From()
			c := from[n.ip]
			if other == n {
				c += from["127.0.0.1"]
			}
			if c > 0 {
				out[other.name+" "+addr] = c
			}
		}
	}
	return out
}

func nodeByIP(ip string) string {
	for _, n := range nodes {
		if n.ip == ip {
			return n.name
		}
	}
	return "<no node has " + ip + ">"
}
