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

// baselineWindow is how long the baseline watches for its agents to recover after the restart.
const baselineWindow = time.Minute

// TestBaselineWithoutExtension: the graceful restart of TestPolicyThroughAPIServerRestart without the extension.
// kube-apiserver advertises the control-plane node's address, which that node serves; Cilium's agents run from
// networking-cilium's chart as it renders it, reaching kube-apiserver through the `kubernetes` ClusterIP that their
// own kube-proxy replacement translates. Positive control: before the restart every agent is connected to the
// advertised address through the ClusterIP (its load balancer holds the Service with that backend) and the policy is
// enforced. Then kube-apiserver restarts, and what the extension prevents is logged for a minute after it is healthy
// again (with the extension every node converged within seconds): whether and when each agent reconnects, whether the
// turned-around policy is enforced, whether the new pods get the identities of their labels and are reached
// (docs/development/workload-pods.md, "Measured").
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
		if err := l.env.Advertise(context.Background(), testenv.AdvertiseAddress); err != nil {
			t.Errorf("advertising %s again: %v", testenv.AdvertiseAddress, err)
		}
	})
	if err := l.env.Advertise(ctx, controlPlane.IP); err != nil {
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

	healthy, violations, err := s.Through(func() error { return l.env.RestartAPIServer(10 * time.Second) })
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("without the extension, during kube-apiserver's graceful restart: %d violations of the policy %v", len(violations), violations)
	// kube-apiserver is back in its own Service: what the agents miss is theirs to see.
	if err := l.env.WaitForAdvertised(ctx, controlPlane.IP); err != nil {
		t.Fatalf("kube-apiserver did not advertise %s again: %v", controlPlane.IP, err)
	}
	if err := s.TurnAround(ctx, false); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for _, f := range s.Flows {
		wg.Go(func() {
			if err := l.cluster.WaitForIdentity(ctx, f.NewB, baselineWindow); err != nil {
				t.Logf("without the extension, after the restart: %v", err)
			}
		})
		wg.Go(func() {
			at, err := f.EnforcedAfterTurn(ctx, baselineWindow)
			if err != nil {
				t.Logf("without the extension, %s after the restart: %v", f.Node, err)
				return
			}
			t.Logf("without the extension, %s enforces the turned-around policy and reaches the new pod %s after kube-apiserver was healthy", f.Node, at.Sub(healthy).Round(100*time.Millisecond))
		})
	}
	for _, n := range l.cluster.Nodes() {
		wg.Go(func() {
			if err := testenv.WaitFor(ctx, baselineWindow, func(context.Context) (bool, error) {
				return n.ThroughClusterIP(ctx, advertised), nil
			}); err != nil {
				backends, _ := n.Backends(ctx, podrun.ClusterIP, 443)
				t.Logf("without the extension, the agent on %s has not reconnected after the restart; its load balancer sends the ClusterIP to %v", n.Name, backends)
				return
			}
			t.Logf("without the extension, the agent on %s reconnected %s after kube-apiserver was healthy", n.Name, time.Since(healthy).Round(100*time.Millisecond))
		})
	}
	wg.Wait()
}
