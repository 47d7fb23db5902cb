package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/gardener/gardener-extension-cilium-selfhosted/test/ciliumnodes"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/fixtures"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/frr"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/testenv"
)

const bgpSection = "10. BGP withdrawal with Cilium's real agents and FRR (test/ciliumnodes, docs/bgp.md's router)"

// metalLBBFD is MetalLB's failover with BFD and FRR's defaults (300 ms x 3), the anchor for a withdrawal.
const metalLBBFD = 900 * time.Millisecond

// bgpProfile is a peer's timers: the exposure's defaults or the fast profile of docs/bgp.md, with issue 27's goal for
// the withdrawal when a node dies (its link down or hung): the hold time and a second, 3.5 s with the fast profile.
type bgpProfile struct {
	name            string
	hold, keepalive int
	deathGoal       time.Duration
}

var bgpProfiles = []bgpProfile{
	{"default timers (hold 9 s)", 9, 3, 10 * time.Second},
	{"fast profile (hold 3 s, keepalive 1 s)", 3, 1, 3500 * time.Millisecond},
}

// agentGoal is issue 27's goal for the withdrawal when the agent is killed or stopped: 0.5 s after the kill or SIGTERM.
const agentGoal = 500 * time.Millisecond

// bgpWithdrawals runs section 10: the exposure announced over BGP to FRR as docs/bgp.md configures it, Gardener's
// chart's agents on three control-plane nodes; per timer profile and way of failing, a control-plane node fails runs
// times, and the time until the router withdraws its route is reported with the share of new connections through the
// VIP that succeeded meanwhile.
func bgpWithdrawals(r *report, runs int) error {
	if why := frr.Available(); why != "" {
		r.Notes = append(r.Notes, "Section 10 did not run: "+why)
		fmt.Println("   skipped:", why)
		return nil
	}
	return withCiliumNodes(r, "10", "bgpbench", func(ctx context.Context, env *testenv.Env, cluster *ciliumnodes.Cluster) error {
		exp, err := cluster.Expose(ctx)
		if err != nil {
			return err
		}
		router, err := cluster.StartRouter(ctx)
		if err != nil {
			return err
		}
		for _, p := range bgpProfiles {
			if err := cluster.Announce(ctx, exp, ciliumnodes.ExposureConfigBGPTimers(p.hold, p.keepalive)); err != nil {
				return err
			}
			for _, failure := range []ciliumnodes.BGPFailure{ciliumnodes.NodeLinkDown, ciliumnodes.NodeHung, ciliumnodes.AgentKilled, ciliumnodes.AgentStopped} {
				if err := withdrawalRuns(ctx, r, cluster, router, p, failure, runs); err != nil {
					return err
				}
			}
		}
		r.Notes = append(r.Notes, "Section 10: new connections through the VIP from a client behind the router, one started every 100 ms "+
			"(each with a 2 s timeout) from the failure until the route was withdrawn and at least 30 had started; the router's "+
			"kernel route to the VIP is read every 20 ms. The router hashes flows by their ports (fib_multipath_hash_policy=1).")
		return nil
	})
}

// withdrawalRuns fails a control-plane node runs times as failure says and reports the median and max time until the
// router withdrew its route, and the share of new connections that succeeded meanwhile.
func withdrawalRuns(ctx context.Context, r *report, cluster *ciliumnodes.Cluster, router *ciliumnodes.Router, p bgpProfile, failure ciliumnodes.BGPFailure, runs int) error {
	var withdrawn []time.Duration
	attempts, succeeded, others := 0, 0, 0
	for i := range runs {
		if _, err := cluster.Run(ctx, ciliumnodes.Agents{Chart: ciliumnodes.GardenerChart}); err != nil {
			return err
		}
		if err := router.WaitForEveryNextHop(ctx); err != nil {
			return err
		}
		if _, _, err := cluster.ServedViaEveryNode(ctx, router); err != nil {
			return err
		}
		node := fixtures.Nodes()[i%len(fixtures.ControlPlaneIPs)].Name
		hold := time.Duration(p.hold) * time.Second
		w, err := cluster.FailBGPNode(ctx, router, node, failure, hold+30*time.Second)
		if err != nil {
			return err
		}
		if w.Withdrawn == 0 {
			return fmt.Errorf("%s, %s: the router kept its route via %s for %s", p.name, failure, node, hold+30*time.Second)
		}
		fmt.Printf("   %s, %s, run %d: %s's route withdrawn after %s; %d of %d new connections succeeded; other next hops lost: %v\n",
			p.name, failure, i+1, node, w.Withdrawn.Round(10*time.Millisecond), w.Succeeded, w.Attempts, w.Others)
		withdrawn = append(withdrawn, w.Withdrawn)
		attempts, succeeded, others = attempts+w.Attempts, succeeded+w.Succeeded, others+len(w.Others)
	}
	slices.Sort(withdrawn)
	name := fmt.Sprintf("%s, %s, %d runs", failure, p.name, runs)
	goal := p.deathGoal
	if failure == ciliumnodes.AgentKilled || failure == ciliumnodes.AgentStopped {
		goal = agentGoal
	}
	median, worst := withdrawn[len(withdrawn)/2], withdrawn[len(withdrawn)-1]
	r.add(Result{Section: bgpSection, Name: "route withdrawn by the router, median, " + name, Value: median.Seconds(), Unit: "s",
		Baseline: metalLBBFD.Seconds(), BaselineName: "MetalLB with BFD (FRR's 300 ms x 3)"})
	r.add(Result{Section: bgpSection, Name: "route withdrawn by the router, max, " + name, Value: worst.Seconds(), Unit: "s",
		Baseline: metalLBBFD.Seconds(), BaselineName: "MetalLB with BFD (FRR's 300 ms x 3)",
		Goal: "<= " + goal.String(), Met: met(worst <= goal)})
	r.add(Result{Section: bgpSection, Name: "new connections through the VIP that succeeded meanwhile, " + name, Value: float64(succeeded), Unit: "count",
		Baseline: float64(attempts), BaselineName: "attempts", Goal: ">= half", Met: met(2*succeeded >= attempts)})
	r.add(Result{Section: bgpSection, Name: "other nodes' next hops lost meanwhile, " + name, Value: float64(others), Unit: "count"})
	return nil
}
