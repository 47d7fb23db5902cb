package datapath

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/ciliumnodes"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/podrun"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/testenv"
)

// baselineWindow is how long the baseline watches for its agents to recover after the restart: ten times what the
// extension needs (TestPolicyThroughAPIServerRestart), within make test's budget; make bench section 12 watches two
// minutes.
const baselineWindow = 30 * time.Second

// TestBaselineWithoutExtension: the graceful restart of TestPolicyThroughAPIServerRestart without the extension.
// kube-apiserver advertises the control-plane node's address, which that node serves; Cilium's agents run from
// networking-cilium's chart as it renders it, reaching kube-apiserver through the `kubernetes` ClusterIP that their
// own kube-proxy replacement translates. Positive control: before the restart every agent is connected to the
// advertised address through the ClusterIP (its load balancer holds the Service with that backend) and the policy is
// enforced. Then kube-apiserver restarts, and what the extension prevents shows for half a minute after it is healthy
// again (with the extension every node converged within seconds), asserted: no agent reconnects, the policy turned
// around is not enforced (the old one still is), the new pods get no identity of their labels
// (docs/development/workload-pods.md, "Measured"). Should Cilium ever recover here, the case fails and says so.
func TestBaselineWithoutExtension(t *testing.T) {
	l := gardenerLane
	l.hold(t)
	ctx := context.Background()
	controlPlane := l.cluster.Node(ciliumnodes.BaselineControlPlane)
	advertised, err := controlPlane.ServeAdvertised()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := restartAPIServer(l, func(e *testenv.Env) error { return e.Advertise(context.Background(), testenv.AdvertiseAddress) }); err != nil {
			t.Errorf("advertising %s again: %v", testenv.AdvertiseAddress, err)
		}
	})
	if err := restartAPIServer(l, func(e *testenv.Env) error { return e.Advertise(ctx, controlPlane.IP) }); err != nil {
		t.Fatal(err)
	}
	if _, err := l.cluster.Run(ctx, ciliumnodes.Agents{Chart: l.line, Baseline: true}); err != nil {
		t.Fatal(err)
	}
	for _, n := range l.cluster.Nodes() {
		if err := testenv.WaitFor(ctx, 2*time.Minute, func(context.Context) (bool, error) {
			return n.ThroughClusterIP(ctx, advertised), nil
		}); err != nil {
			peers, _ := n.AgentPeers()
			backends, _ := n.Backends(ctx, podrun.ClusterIP, 443)
			t.Fatalf("positive control: the baseline agent on %s is connected to %v, its load balancer sends the ClusterIP to %v; want %s", n.Name, peers, backends, advertised)
		}
	}
	s := startPolicyScenario(t, l)

	healthy, violations, err := s.Through(func() error {
		return restartAPIServer(l, func(e *testenv.Env) error { return e.RestartAPIServer(10 * time.Second) })
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("without the extension, during kube-apiserver's graceful restart: %d violations of the policy %v", len(violations), violations)
	// kube-apiserver is back in its own Service: what the agents miss is theirs to see.
	if err := l.env.WaitForAdvertised(ctx, controlPlane.IP); err != nil {
		t.Fatalf("kube-apiserver did not advertise %s again: %v", controlPlane.IP, err)
	}
	if err := s.TurnAround(ctx); err != nil {
		t.Fatal(err)
	}
	// What it shows, asserted (docs/development/workload-pods.md, "Measured"): for baselineWindow, no agent
	// reconnects, the turned-around policy is not enforced (the old one still is) and the new pods get no identity.
	var wg sync.WaitGroup
	for _, f := range s.Flows {
		wg.Go(func() {
			if err := l.cluster.WaitForIdentity(ctx, f.NewB, baselineWindow); err == nil {
				t.Errorf("without the extension, the new pod %s got its identity after the restart: the baseline no longer shows the deadlock", f.NewB.Pod.Name)
			}
		})
		wg.Go(func() {
			if at, err := f.EnforcedAfterTurn(ctx, baselineWindow); err == nil {
				t.Errorf("without the extension, %s enforces the turned-around policy %s after kube-apiserver was healthy: the baseline no longer shows the deadlock", f.Node, at.Sub(healthy).Round(100*time.Millisecond))
				return
			}
			if _, err := f.WaitEnforced(ctx, f.A, f.B, 10*time.Second); err != nil {
				t.Errorf("without the extension, %s after the restart enforces neither policy: %v", f.Node, err)
			}
		})
	}
	for _, n := range l.cluster.Nodes() {
		wg.Go(func() {
			if err := testenv.WaitFor(ctx, baselineWindow, func(context.Context) (bool, error) {
				return n.ThroughClusterIP(ctx, advertised), nil
			}); err == nil {
				t.Errorf("without the extension, the agent on %s reconnected %s after kube-apiserver was healthy: the baseline no longer shows the deadlock", n.Name, time.Since(healthy).Round(100*time.Millisecond))
				return
			}
			backends, _ := n.Backends(ctx, podrun.ClusterIP, 443)
			t.Logf("without the extension, the agent on %s has not reconnected within %s; its load balancer sends the ClusterIP to %v", n.Name, baselineWindow, backends)
		})
	}
	wg.Wait()
}
