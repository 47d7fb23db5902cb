package datapath

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/gardener/gardener-extension-cilium-selfhosted/test/ciliumnodes"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/fixtures"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/frr"
)

// ecmpConnections is how many new connections, each from a port of its own, the BGP test sends through the VIP from
// behind the router: enough that the router's hash sends some over every node.
const ecmpConnections = 30

// TestBGP: the operator switches the exposure to `announcement: BGP` with the top-of-rack router of docs/bgp.md as its
// peer; FRR runs that configuration verbatim. The exposure turns Succeeded only once the real agents advertise the VIP:
// by then the router has a route to it. HTTPS through the VIP from the client behind the router then works via every
// control-plane node (how long after Succeeded is logged: agents that ran through the switch of the Service take a
// while). With each Cilium line's agents started afresh: every control-plane node advertises the VIP (one next hop
// each in the router's kernel) and no other node peers; the router spreads new connections over all of them and none
// fails, each reaching a kube-apiserver whose certificate verifies under the shoot's API name. No FRR process runs in
// the machine's network namespace. The exposure goes back to L2 afterwards.
func TestBGP(t *testing.T) {
	if why := frr.Available(); why != "" {
		t.Skip(why)
	}
	ctx := context.Background()
	exp := expose(t)
	router, err := cluster.StartRouter(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cluster.Announce(ctx, exp, fixtures.ExposureConfigL2); err != nil {
			t.Errorf("back to L2: %v", err)
		}
		if _, err := cluster.WaitForLeaseHolder(ctx, exp, ""); err != nil {
			t.Errorf("back to L2: %v", err)
		}
	})
	through := cluster.Chart()
	if err := cluster.Announce(ctx, exp, ciliumnodes.ExposureConfigBGP); err != nil {
		t.Fatalf("switching the exposure to BGP: %v\n%s", err, router.Log())
	}
	// Read right after the exposure was seen Succeeded: the route must be there already.
	if hops, err := router.NextHops(fixtures.ExposureVIP); err != nil || len(hops) == 0 {
		neighbors, _ := router.Neighbors(ctx)
		t.Errorf("the exposure is Succeeded, but the router has no route to the VIP (%v; neighbours %+v)", err, neighbors)
	}
	if len(exp.Status.Ingress) != 1 || exp.Status.Ingress[0].IP != fixtures.ExposureVIP {
		t.Errorf("status.ingress %+v, want %s", exp.Status.Ingress, fixtures.ExposureVIP)
	}
	took, early := servedViaEveryNode(t, router)
	t.Logf("after the switch from L2 (agents of %s running through it), HTTPS through the VIP worked via every node %s after Succeeded; %d connections failed before: %v",
		through, took.Round(100*time.Millisecond), len(early), early)
	// The agents that ran through the switch last: each line's start afresh.
	lines := slices.Clone(ciliumLines)
	if i := slices.Index(lines, through); i >= 0 {
		lines = append(slices.Delete(lines, i, i+1), through)
	}
	for _, line := range lines {
		t.Run(string(line), func(t *testing.T) { bgpAdvertised(t, router, line) })
	}
	if found, err := frr.InMachineNamespace(); err != nil || len(found) > 0 {
		t.Errorf("FRR processes in the machine's network namespace: %v (%v)", found, err)
	}
}

// sourcePort is the last source port the BGP cases connected from: each connection gets a port of its own, none of
// them in TIME_WAIT from an earlier one.
var sourcePort atomic.Int32

func nextSourcePort() int { return 40000 + int(sourcePort.Add(1)) }

// servedViaEveryNode sends new connections through the VIP from behind the router until one has worked via each
// control-plane node, and says how long that took and which failed before. A node advertises the VIP before its load
// balancer may serve it.
func servedViaEveryNode(t *testing.T, router *ciliumnodes.Router) (time.Duration, []string) {
	t.Helper()
	ctx := context.Background()
	start := time.Now()
	served := map[string]bool{}
	var early []string
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		sport := nextSourcePort()
		hop, err := router.Via(sport)
		if err != nil {
			return false, err
		}
		if _, err := cluster.ReadyzFromRemote(ctx, router, sport); err != nil {
			early = append(early, fmt.Sprintf("%s via %s: %v (ICMP unreachables sent so far: %v; agents %s)",
				time.Since(start).Round(100*time.Millisecond), hop, err, cluster.UnreachablesSent(), cluster.AgentViews(ctx)))
		} else {
			served[hop] = true
		}
		return len(served) == len(fixtures.ControlPlaneIPs), nil
	}); err != nil {
		t.Fatalf("HTTPS through the VIP from behind the router did not work via every control-plane node: it did via %v; failures %v", served, early)
	}
	return time.Since(start), early
}

func bgpAdvertised(t *testing.T, router *ciliumnodes.Router, line ciliumnodes.Chart) {
	ctx := context.Background()
	if _, err := cluster.Run(ctx, ciliumnodes.Agents{Chart: line}); err != nil {
		t.Fatal(err)
	}
	var hops []string
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		var err error
		hops, err = router.NextHops(fixtures.ExposureVIP)
		slices.Sort(hops)
		return slices.Equal(hops, fixtures.ControlPlaneIPs), err
	}); err != nil {
		neighbors, _ := router.Neighbors(ctx)
		t.Fatalf("the router's route to the VIP goes via %v, want every control-plane node %v: %v; neighbours %+v\n%s", hops, fixtures.ControlPlaneIPs, err, neighbors, router.Log())
	}
	neighbors, err := router.Neighbors(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var established []string
	for _, n := range neighbors {
		if n.State == "Established" {
			established = append(established, n.Address)
		}
	}
	slices.Sort(established)
	if !slices.Equal(established, fixtures.ControlPlaneIPs) {
		t.Errorf("established sessions with %v (%+v), want exactly the control-plane nodes %v", established, neighbors, fixtures.ControlPlaneIPs)
	}
	if took, early := servedViaEveryNode(t, router); len(early) > 0 {
		t.Logf("HTTPS through the VIP worked via every node after %s; before that: %v", took.Round(100*time.Millisecond), early)
	}

	via := map[string]int{}
	var failures []string
	for range ecmpConnections {
		sport := nextSourcePort()
		hop, err := router.Via(sport)
		if err != nil {
			t.Fatal(err)
		}
		via[hop]++
		if _, err := cluster.ReadyzFromRemote(ctx, router, sport); err != nil {
			failures = append(failures, hop+": "+err.Error())
		}
	}
	if len(failures) > 0 {
		t.Errorf("%d of %d new connections through the VIP from behind the router failed: %v", len(failures), ecmpConnections, failures)
	}
	for _, ip := range fixtures.ControlPlaneIPs {
		if via[ip] == 0 {
			t.Errorf("the router sent none of %d connections via %s: %v", ecmpConnections, ip, via)
		}
	}
	t.Logf("sessions %v; route to the VIP via %v; %d connections from behind the router spread as %v, %d failed", established, hops, ecmpConnections, via, len(failures))
}
