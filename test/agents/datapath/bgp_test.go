// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package datapath

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	extensionsv1alpha1 "github.com/gardener/gardener/pkg/apis/extensions/v1alpha1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/ciliumnodes"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/fixtures"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/frr"
)

// ecmpConnections is how many new connections, each from a port of its own, the BGP test sends through the VIP from
// behind the router: enough that the router's hash sends some over every node.
const ecmpConnections = 30

// TestBGP: the operator switches the exposure to `announcement: BGP` with the top-of-rack router of docs/bgp.md as its
// peer; FRR runs that configuration verbatim. The exposure turns Succeeded only once the real agents advertise the VIP:
// by then the router has a route to it. HTTPS through the VIP from the client behind the router then works via every
// control-plane node with the agents that ran through the replacement of the Service, none failing but for at most a
// connection per node that its agent resets while it replaces the Service (docs/bgp.md). With the agents
// started afresh: every control-plane node advertises the VIP (one next hop each in the router's kernel) and no other
// node peers; the router spreads new connections over all of them and none fails, each reaching a kube-apiserver whose
// certificate verifies under the shoot's API name. No FRR process runs in the machine's network namespace. The
// exposure goes back to L2 afterwards. On each lane, with its line; then Gardener's lane stops one kube-apiserver
// with its node drained first, and the newest line's lane has its DaemonSet roll (bgpRollingUpdate; the agents it
// leaves are those started afresh), its control-plane nodes fail (bgpWithdrawals) and one kube-apiserver stop: the
// lanes take about as long.
func TestBGP(t *testing.T) {
	if why := frr.Available(); why != "" {
		t.Skip(why)
	}
	onEachLane(t, bgpOnLane)
}

func bgpOnLane(t *testing.T, l *lane) {
	ctx := context.Background()
	exp := expose(t, l)
	router, err := l.cluster.BGP().StartRouter(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.cluster.BGP().Announce(ctx, exp, fixtures.ExposureConfigL2); err != nil {
			t.Errorf("back to L2: %v", err)
		}
		if _, err := l.cluster.L2().WaitForLeaseHolder(ctx, exp, ""); err != nil {
			t.Errorf("back to L2: %v", err)
		}
		l.cluster.BGP().StopRouter()
	})
	if err := l.cluster.BGP().Announce(ctx, exp, ciliumnodes.ExposureConfigBGP); err != nil {
		t.Fatalf("switching the exposure to BGP: %v\n%s", err, router.Log())
	}
	// Read right after the exposure was seen Succeeded: the route must be there already.
	if hops, err := router.NextHops(fixtures.ExposureVIP); err != nil || len(hops) == 0 {
		neighbors, _ := router.Neighbors(ctx)
		t.Errorf("the exposure is Succeeded, but the router has no route to the VIP (%v; neighbours %+v)\n%s\n--- the router's log ---\n%s",
			err, neighbors, l.cluster.BGP().NodeConfigs(ctx), router.Log())
	}
	if len(exp.Status.Ingress) != 1 || exp.Status.Ingress[0].IP != fixtures.ExposureVIP {
		t.Errorf("status.ingress %+v, want %s", exp.Status.Ingress, fixtures.ExposureVIP)
	}
	// Every node's load balancer serves the VIP once the router routes it there, but for a connection a node may reset
	// while its agent replaces the Service (docs/bgp.md, "Switching an exposure between L2 and BGP"): at most one
	// per control-plane node before every node served one.
	took, early, err := l.cluster.BGP().ServedViaEveryNode(ctx, router)
	if err != nil {
		t.Fatal(err)
	}
	if len(early) > 0 {
		report := t.Logf
		if len(early) > len(fixtures.ControlPlaneIPs) {
			report = t.Errorf
		}
		report("after the switch from L2 (agents of %s running through it), %d new connections through the VIP failed before one had worked via every node: %v",
			l.line, len(early), early)
		// When each agent replaced the old Service's frontend by the new one's (docs/development/testing.md, Flakes).
		for _, n := range l.cluster.Nodes() {
			if n.ControlPlane {
				t.Logf("--- the agent on %s ---\n%s", n.Name, n.LogTail())
			}
		}
	}
	t.Logf("after the switch from L2 (agents of %s running through it), HTTPS through the VIP worked via every node %s after Succeeded",
		l.line, took.Round(100*time.Millisecond))
	// The longer cases on the newest line's lane, whose cases are shorter (Gardener's runs TestPolicyThroughAPIServerRestart).
	if l == gardenerLane {
		t.Run("agents started afresh", func(t *testing.T) { bgpAdvertised(t, l, router, true) })
		t.Run("one kube-apiserver down, its node drained first", func(t *testing.T) { bgpDrainedAPIServerRestart(t, l, exp, router) })
	} else {
		// A rolling update that went through started every agent anew under BGP.
		rolled := t.Run("rolling update", func(t *testing.T) { bgpRollingUpdate(t, l, exp, router) })
		t.Run("agents started afresh", func(t *testing.T) { bgpAdvertised(t, l, router, !rolled) })
		t.Run("withdrawal", func(t *testing.T) { bgpWithdrawals(t, l, exp, router) })
		t.Run("one kube-apiserver down", func(t *testing.T) { bgpWithOneAPIServerDown(t, l, exp, router) })
	}
	if found, err := frr.InMachineNamespace(); err != nil || len(found) > 0 {
		t.Errorf("FRR processes in the machine's network namespace: %v (%v)", found, err)
	}
}

// bgpWithOneAPIServerDown: one control-plane node's kube-apiserver stops, its node and its BGP session staying up, as
// TestVIPWithOneAPIServerDown does under L2. The extension publishes that endpoint as not ready; once the agents have
// applied that, no new connection fails that the router sends to another node, and none fails when the kube-apiserver
// is back. The node whose kube-apiserver stopped goes on announcing the VIP with a blind agent (it reaches
// kube-apiserver only at localhost), which still load-balances to its own stopped kube-apiserver until that serves
// again: the share of the connections the router sends there that fail is logged (docs/bgp.md, "One kube-apiserver
// down").
func bgpWithOneAPIServerDown(t *testing.T, l *lane, exp *extensionsv1alpha1.SelfHostedShootExposure, router *ciliumnodes.Router) {
	ctx := context.Background()
	if err := l.run(ctx, ciliumnodes.Agents{}); err != nil {
		t.Fatal(err)
	}
	if err := l.cluster.ExtensionArgs(ctx); err != nil {
		t.Fatal(err)
	}
	o, err := l.cluster.StopOneAPIServer(ctx, exp, ciliumnodes.Outage{Attempts: ecmpConnections, Router: router})
	if err != nil {
		t.Fatal(err)
	}
	checkOutage(t, o, "new connections through the VIP that the router sent to other nodes")
	t.Logf("%s's kube-apiserver down, its node and BGP session up: %d of %d new connections from behind the router failed, the last sent to another node %s after the stop; "+
		"published not ready after %s; after that, %d of %d connections sent to %s itself failed (its blind agent), %d of those sent elsewhere; "+
		"back: published ready after %s, %d of %d failed (and %d sent to %s itself before that)",
		o.Node, o.Failed, o.Attempts, o.LastFailureElsewhere.Round(100*time.Millisecond), o.TakenOut.Round(100*time.Millisecond),
		o.FailedViaDown, o.ViaDown, o.Node, o.FailedAfterSettled, o.Back.Round(100*time.Millisecond), o.BackFailed, o.BackAttempts,
		o.BackFailedViaDown, o.Node)
}

// bgpDrainedAPIServerRestart: docs/bgp.md's drain for a planned kube-apiserver restart under BGP. The exposure
// selects the control-plane nodes without the drain label; the operator labels one, and its agent, which still sees
// kube-apiserver, withdraws its route from the router. Its kube-apiserver then stops and comes back: the router sends
// that node no connection meanwhile, and those the other nodes' agents send to the stopped kube-apiserver fail only
// until its endpoint is published not ready, as under L2. Once the label is gone, the node advertises again.
func bgpDrainedAPIServerRestart(t *testing.T, l *lane, exp *extensionsv1alpha1.SelfHostedShootExposure, router *ciliumnodes.Router) {
	ctx := context.Background()
	if err := l.cluster.BGP().Announce(ctx, exp, ciliumnodes.ExposureConfigBGPWith(ciliumnodes.BGPSettings{Drainable: true})); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.cluster.BGP().Announce(ctx, exp, ciliumnodes.ExposureConfigBGP); err != nil {
			t.Errorf("back to the exposure's defaults: %v", err)
		}
	})
	if err := l.run(ctx, ciliumnodes.Agents{}); err != nil {
		t.Fatal(err)
	}
	if err := router.WaitForEveryNextHop(ctx); err != nil {
		t.Fatal(err)
	}
	drained := fixtures.Nodes()[0].Name
	address := l.cluster.Node(drained).Address()
	others := slices.DeleteFunc(slices.Clone(fixtures.ControlPlaneIPs), func(ip string) bool { return ip == address })
	start := time.Now()
	if err := l.cluster.BGP().Drain(ctx, drained, true); err != nil {
		t.Fatal(err)
	}
	undrained := false
	t.Cleanup(func() {
		if !undrained {
			_ = l.cluster.BGP().Drain(ctx, drained, false)
		}
	})
	if err := l.cluster.BGP().WaitForDrainCopied(ctx, drained, true, 3*time.Minute); err != nil {
		t.Fatalf("%s's agent did not copy %s onto its CiliumNode: %v", drained, ciliumnodes.DrainLabel, err)
	}
	labelCopied := time.Since(start)
	if err := router.WaitForNextHops(ctx, others); err != nil {
		t.Fatalf("after labelling %s with %s: %v\n%s", drained, ciliumnodes.DrainLabel, err, l.cluster.BGP().NodeConfigs(ctx))
	}
	withdrawn := time.Since(start)
	o, err := l.cluster.StopOneAPIServer(ctx, exp, ciliumnodes.Outage{Attempts: ecmpConnections, Router: router, Drained: drained})
	if err != nil {
		t.Fatal(err)
	}
	checkOutage(t, o, "new connections through the VIP from behind the router")
	if o.ViaDown > 0 {
		t.Errorf("the router sent %d connections to the drained %s", o.ViaDown, drained)
	}
	undrained = true
	start = time.Now()
	if err := l.cluster.BGP().Drain(ctx, drained, false); err != nil {
		t.Fatal(err)
	}
	// Two watches of a node's agent that just went through its kube-apiserver's outage may each wait up to a minute
	// before they retry (WaitForDrainCopied): the Node's, before the agent copies the label's removal for the
	// operator, and the CiliumBGPNodeConfigs', before it sees the operator's new one.
	if err := l.cluster.BGP().WaitForDrainCopied(ctx, drained, false, 3*time.Minute); err != nil {
		t.Fatalf("%s's agent did not copy the removal of %s onto its CiliumNode: %v\n%s", drained, ciliumnodes.DrainLabel, err, l.cluster.BGP().NodeConfigs(ctx))
	}
	copied := time.Since(start)
	if err := router.WaitForEveryNextHop(ctx); err != nil {
		t.Fatalf("after removing %s from %s: %v\n%s", ciliumnodes.DrainLabel, drained, err, l.cluster.BGP().NodeConfigs(ctx))
	}
	t.Logf("%s drained: the label on its CiliumNode after %s, its route withdrawn %s after the label; its kube-apiserver down: %d of %d new connections from behind the router failed, the last %s after the stop, "+
		"published not ready after %s, %d failed after that; back: published ready after %s, %d of %d failed; undrained: the label's removal on its CiliumNode after %s, its route back after %s",
		drained, labelCopied.Round(100*time.Millisecond), withdrawn.Round(100*time.Millisecond), o.Failed, o.Attempts, o.LastFailure.Round(100*time.Millisecond), o.TakenOut.Round(100*time.Millisecond),
		o.FailedAfterSettled, o.Back.Round(100*time.Millisecond), o.BackFailed, o.BackAttempts, copied.Round(100*time.Millisecond), time.Since(start).Round(100*time.Millisecond))
}

// bgpAdvertised: agents started while the exposure announces over BGP (afresh: started here; else those a rolling
// update started) hold sessions with exactly the control-plane nodes, and the router spreads new connections through
// the VIP over all of them.
func bgpAdvertised(t *testing.T, l *lane, router *ciliumnodes.Router, afresh bool) {
	ctx := context.Background()
	if err := l.run(ctx, ciliumnodes.Agents{Afresh: afresh}); err != nil {
		t.Fatal(err)
	}
	if err := router.WaitForEveryNextHop(ctx); err != nil {
		t.Fatal(err)
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
	took, early, err := l.cluster.BGP().ServedViaEveryNode(ctx, router)
	if err != nil {
		t.Fatal(err)
	}
	if len(early) > 0 {
		t.Errorf("HTTPS through the VIP worked via every node after %s; before that, %d failed: %v", took.Round(100*time.Millisecond), len(early), early)
	}

	via := map[string]int{}
	var failures []string
	for range ecmpConnections {
		sport := router.NextSourcePort()
		_, err := l.cluster.BGP().ReadyzFromRemote(ctx, router, sport)
		hop := router.Hop(ctx, sport)
		via[hop]++
		if err != nil {
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
	t.Logf("sessions %v; route to the VIP via every one of them; %d connections from behind the router spread as %v, %d failed", established, ecmpConnections, via, len(failures))
}

// bgpWithdrawals: a control-plane node fails (link down, hung, its agent killed or stopped with SIGTERM) and the
// router's route to the VIP loses that node's next hop, and no other, within the hold time and a margin, while new
// connections from behind the router go on succeeding (the share is logged; make bench reports it); with the
// exposure's default timers (hold 9 s) and the fast profile (hold 3 s, keepalive 1 s) for the node deaths, whose
// sessions end only with the hold timer. A profile reaches the running agents as an operator's change does, without
// a restart: Cilium resets a session whose timers changed (pkg/bgp/gobgp/peer.go needsHardReset), and the router's
// hold times show it. The times are logged (make bench reports them over many runs); the node comes back with the
// next Run, and its route with it.
func bgpWithdrawals(t *testing.T, l *lane, exp *extensionsv1alpha1.SelfHostedShootExposure, router *ciliumnodes.Router) {
	ctx := context.Background()
	t.Cleanup(func() {
		if err := l.cluster.BGP().Announce(ctx, exp, ciliumnodes.ExposureConfigBGP); err != nil {
			t.Errorf("back to the default timers: %v", err)
		}
	})
	i := 0
	for _, profile := range []struct {
		name            string
		hold, keepalive int
		failures        []ciliumnodes.BGPFailure
	}{
		{"default timers", 9, 3, []ciliumnodes.BGPFailure{ciliumnodes.NodeLinkDown, ciliumnodes.NodeHung, ciliumnodes.AgentKilled, ciliumnodes.AgentStopped}},
		{"fast profile", 3, 1, []ciliumnodes.BGPFailure{ciliumnodes.NodeLinkDown, ciliumnodes.NodeHung}},
	} {
		config := ciliumnodes.ExposureConfigBGP
		if profile.hold != 9 {
			config = ciliumnodes.ExposureConfigBGPWith(ciliumnodes.BGPSettings{HoldTime: profile.hold, KeepAlive: profile.keepalive})
		}
		if err := l.cluster.BGP().Announce(ctx, exp, config); err != nil {
			t.Fatal(err)
		}
		hold := time.Duration(profile.hold) * time.Second
		for _, failure := range profile.failures {
			t.Run(profile.name+"/"+string(failure), func(t *testing.T) {
				if err := l.run(ctx, ciliumnodes.Agents{}); err != nil {
					t.Fatal(err)
				}
				// The profile reaches the agents as Cilium resets their sessions: every control-plane node's is
				// established again with its hold time before a node fails.
				var holds map[string]time.Duration
				if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
					var err error
					holds, err = router.HoldTimes(ctx)
					return err == nil && !slices.ContainsFunc(fixtures.ControlPlaneIPs, func(ip string) bool { return holds[ip] != hold }), err
				}); err != nil {
					t.Fatalf("the sessions run with hold times %v, want %s with every control-plane node: %v", holds, hold, err)
				}
				for addr, h := range holds {
					if h != hold {
						t.Fatalf("the session with %s runs with a hold time of %s, want %s (%v)", addr, h, hold, holds)
					}
				}
				if err := router.WaitForEveryNextHop(ctx); err != nil {
					t.Fatal(err)
				}
				node := fixtures.Nodes()[i%len(fixtures.ControlPlaneIPs)].Name
				i++
				w, err := l.cluster.BGP().FailNode(ctx, router, node, failure, hold+10*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				if w.Withdrawn == 0 {
					t.Errorf("the router kept its route via %s for %s after %s", node, hold+10*time.Second, failure)
				}
				if len(w.Others) > 0 {
					t.Errorf("the route lost other nodes' next hops too: %v", w.Others)
				}
				// The share is make bench's to report against the goal (at least half): here, that the VIP serves on.
				if w.Succeeded == 0 {
					t.Errorf("none of %d new connections through the VIP succeeded while %s failed: %v", w.Attempts, node, w.Failures)
				}
				t.Logf("%s (%s, hold %s): the router withdrew its route after %s; %d of %d new connections succeeded meanwhile",
					node, failure, hold, w.Withdrawn.Round(10*time.Millisecond), w.Succeeded, w.Attempts)
			})
		}
	}
}

// rolloutRestartTime is the graceful restart time of the rolling update with graceful restart on: longer than an agent
// takes to come back on two cores, short enough that a route left stale by mistake would still go within the test.
const rolloutRestartTime = 60

// bgpRollingUpdate: the lane's agent DaemonSet rolls, as in TestVIPThroughRollingUpdate, while the exposure announces
// over BGP, with graceful restart off (the exposure's default) and on. Only control-plane nodes are ever next hops of
// the router's route, and the VIP serves from behind the router at the end. Without graceful restart, each restarting
// agent's node leaves the route until its new agent advertises again. With it on, a restarting agent's node stays a
// next hop (the router keeps its route as stale: Cilium sends the restart and forwarding bits, FRR is a helper by
// default), so the router does not rehash. What happened to new and established connections from behind the router
// is logged; make bench reports it over several runs (docs/bgp.md, "Graceful restart").
func bgpRollingUpdate(t *testing.T, l *lane, exp *extensionsv1alpha1.SelfHostedShootExposure, router *ciliumnodes.Router) {
	ctx := context.Background()
	t.Cleanup(func() {
		if err := l.cluster.BGP().Announce(ctx, exp, ciliumnodes.ExposureConfigBGP); err != nil {
			t.Errorf("back to the exposure's defaults: %v", err)
		}
	})
	for _, gr := range []struct {
		name    string
		restart int
	}{{"graceful restart off", 0}, {"graceful restart on", rolloutRestartTime}} {
		t.Run(gr.name, func(t *testing.T) {
			if err := l.cluster.BGP().Announce(ctx, exp, ciliumnodes.ExposureConfigBGPWith(ciliumnodes.BGPSettings{GracefulRestart: gr.restart})); err != nil {
				t.Fatal(err)
			}
			if err := l.run(ctx, ciliumnodes.Agents{}); err != nil {
				t.Fatal(err)
			}
			r, err := l.cluster.RollOut(ctx, exp, establishedThroughRollout, router)
			if err != nil {
				t.Fatal(err)
			}
			for _, route := range r.Routes {
				for _, hop := range route.Hops {
					if !slices.Contains(fixtures.ControlPlaneIPs, hop) {
						t.Errorf("the router's route to the VIP went via %s, which is no control-plane node: %v", hop, r.Routes)
					}
				}
			}
			if gr.restart > 0 && r.Withdrawals() > 0 {
				t.Errorf("with graceful restart on, next hops left the router's route %d times during the rollout: %v", r.Withdrawals(), r.Routes)
			}
			t.Logf("%s: the agents rolled in %s; the router's route %v (%d next hops withdrawn); %d of %d new connections from behind the router failed: %s; %d of %d established connections broke: %s",
				gr.name, r.Took.Round(100*time.Millisecond), r.Routes, r.Withdrawals(), r.Failed, r.Attempts, strings.Join(r.Failures, "; "),
				len(r.Broken), r.Established, strings.Join(r.Broken, "; "))
		})
	}
}
