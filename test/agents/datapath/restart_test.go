// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package datapath

import (
	"context"
	"maps"
	"slices"
	"testing"
	"time"

	gardencorev1beta1 "github.com/gardener/gardener/pkg/apis/core/v1beta1"
	extensionsv1alpha1 "github.com/gardener/gardener/pkg/apis/extensions/v1alpha1"

	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/ciliumnodes"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/podrun"
)

// baselineWindow is how long the baseline is watched after each restart: ten times what the extension needs, within
// make test's budget; make bench section 12 watches two minutes.
const baselineWindow = 30 * time.Second

// TestPolicyThroughAPIServerRestart: the failure this project exists for (issue 44), with the extension and without
// it in the same restarts. On Gardener's lane, the control-plane node cp-0 and the worker run their agents as the
// webhook admitted them; cp-1 and cp-2, which a shoot of one control-plane node does not have, run the baseline:
// networking-cilium's chart as rendered, reaching kube-apiserver through the `kubernetes` ClusterIP, which kube-apiserver
// backs with cp-0's address (ciliumnodes.Baseline). Each side runs workload pods under a NetworkPolicy of its own.
// Positive control: before the restarts every baseline agent is connected through the ClusterIP and both policies are
// enforced. Then the one kube-apiserver is killed with a minute's outage (its address stays in the `kubernetes`
// Service), and then restarts gracefully, as kubelet restarts a static pod whose manifest changed (SIGTERM:
// kube-apiserver takes its address out of the Service first); the kill first, since the baseline does not recover from
// the graceful one. Throughout, what each policy allows connects and what it denies is dropped, on every node; right
// after kube-apiserver is back, both policies are turned around and a new pod starts on each node.
//
// With the extension, every node enforces the new policy and reaches the new pods (the time from kube-apiserver
// healthy is logged per node), every agent is back on its own connection (localhost on the control-plane node, its
// address elsewhere), none reached the ClusterIP or the VIP, and the exposure is Succeeded with a client outside
// reaching kube-apiserver through the VIP, before and after. Without it, as docs/development/workload-pods.md
// ("Measured") says: after the kill every agent reconnects; after the graceful restart, for baselineWindow, no agent
// reconnects, the turned-around policy is not enforced (the old one still is) and the new pods get no identity. Should
// Cilium ever recover there, the case fails and says so. `make bench` section 12 repeats both restarts five times.
func TestPolicyThroughAPIServerRestart(t *testing.T) {
	l := gardenerLane
	l.hold(t)
	ctx := context.Background()
	extensionNodes := l.cluster.ScenarioNodes()
	baselineNodes := slices.DeleteFunc(l.cluster.Names(), func(n string) bool { return slices.Contains(extensionNodes, n) })
	b, err := l.cluster.StartBaseline(ctx, baselineNodes)
	t.Cleanup(func() {
		if err := b.Stop(context.Background()); err != nil {
			t.Errorf("ending the baseline: %v", err)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	agentPods, err := l.cluster.Run(ctx, ciliumnodes.Agents{Chart: l.line, Baseline: baselineNodes})
	if err != nil {
		t.Fatal(err)
	}
	// One scenario per side for both restarts: each restart turns them around.
	with := startPolicyScenario(t, l, "restart", extensionNodes)
	without := startPolicyScenario(t, l, "baseline", baselineNodes)
	killed, graceful := ciliumnodes.APIServerRestarts[1], ciliumnodes.APIServerRestarts[0]
	for _, r := range []ciliumnodes.APIServerRestart{killed, graceful} {
		t.Run(r.Name, func(t *testing.T) {
			exp := expose(t, l)
			if _, err := l.cluster.L2().WaitUntilServing(ctx, exp); err != nil {
				t.Fatalf("the VIP before the restart: %v", err)
			}
			conv, rec, err := b.RestartBeside(ctx, r, with, without, 3*time.Minute, baselineWindow)
			for _, v := range conv.Violations {
				t.Errorf("during the restart: %s", v)
			}
			if err != nil {
				t.Errorf("after the restart: %v", err)
			}
			for _, node := range slices.Sorted(maps.Keys(conv.Enforced)) {
				t.Logf("with the extension, %s enforces the turned-around policy and reaches the new pod %s after kube-apiserver was healthy", node, conv.Enforced[node].Round(100*time.Millisecond))
			}
			for _, name := range extensionNodes {
				assertConnections(t, l.cluster, l.cluster.Node(name), agentPods[name])
			}
			for from, count := range b.ReachedFrom() {
				if n := l.cluster.NodeByIP(from); n != nil && slices.Contains(extensionNodes, n.Name) {
					t.Errorf("%d connections from %s reached the `kubernetes` Service's backend %s", count, n.Name, b.Advertised)
				}
			}
			assertVIPAfterRestart(t, l, exp)
			if r.Name == graceful.Name {
				assertDeadlocked(t, l, b, without, rec)
			} else {
				assertReconnected(t, l, b, rec)
			}
		})
	}
}

// assertVIPAfterRestart: the exposure is Succeeded again, and a client outside reaches kube-apiserver through the VIP,
// which only the announcing node answers; the extension's controllers run.
func assertVIPAfterRestart(t *testing.T, l *lane, exp *extensionsv1alpha1.SelfHostedShootExposure) {
	t.Helper()
	ctx := context.Background()
	if err := l.env.Exposures().WaitForLastOperation(ctx, exp, time.Minute, func(op *gardencorev1beta1.LastOperation) bool {
		return op.State == gardencorev1beta1.LastOperationStateSucceeded
	}); err != nil {
		t.Errorf("the exposure after the restart: %v", err)
	}
	if _, err := l.cluster.L2().WaitUntilServing(ctx, exp); err != nil {
		t.Errorf("the VIP after the restart: %v", err)
	}
	if err := l.cluster.WaitForExtensionLeader(ctx); err != nil {
		t.Errorf("the extension's controllers after the restart: %v", err)
	}
}

// assertReconnected: after the kill every baseline agent is connected through the ClusterIP again (kube-apiserver's
// address stayed in its Service); what else recovered within baselineWindow is logged.
func assertReconnected(t *testing.T, l *lane, b *ciliumnodes.Baseline, rec ciliumnodes.Recovery) {
	t.Helper()
	for _, name := range b.Nodes {
		after, ok := rec.Reconnected[name]
		if !ok {
			backends, _ := l.cluster.Node(name).Backends(context.Background(), podrun.ClusterIP, 443)
			t.Errorf("without the extension, the agent on %s has not reconnected within %s of the kill; its load balancer sends the ClusterIP to %v", name, baselineWindow, backends)
			continue
		}
		t.Logf("without the extension, the agent on %s reconnected %s after kube-apiserver was healthy", name, after.Round(100*time.Millisecond))
	}
	t.Logf("without the extension, within %s of the kill: nodes enforcing the turned-around policy %v, new pods identified %v", baselineWindow, rec.Enforcing, rec.Identified)
}

// assertDeadlocked: after the graceful restart, for baselineWindow, no baseline agent reconnects, the turned-around
// policy is not enforced (the old one still is) and the new pods get no identity.
func assertDeadlocked(t *testing.T, l *lane, b *ciliumnodes.Baseline, s *ciliumnodes.PolicyScenario, rec ciliumnodes.Recovery) {
	t.Helper()
	ctx := context.Background()
	for pod, after := range rec.Identified {
		t.Errorf("without the extension, the new pod %s got its identity %s after kube-apiserver was healthy: the baseline no longer shows the deadlock", pod, after.Round(100*time.Millisecond))
	}
	for node, after := range rec.Enforcing {
		t.Errorf("without the extension, %s enforces the turned-around policy %s after kube-apiserver was healthy: the baseline no longer shows the deadlock", node, after.Round(100*time.Millisecond))
	}
	for node, after := range rec.Reconnected {
		t.Errorf("without the extension, the agent on %s reconnected %s after kube-apiserver was healthy: the baseline no longer shows the deadlock", node, after.Round(100*time.Millisecond))
	}
	for _, f := range s.Flows {
		if _, ok := rec.Enforcing[f.Node]; ok {
			continue
		}
		// The policy before the turn-around, which let the clients now denied in.
		if _, err := ciliumnodes.WaitEnforced(ctx, f.Server, f.Denied, f.Allowed, 10*time.Second); err != nil {
			t.Errorf("without the extension, %s after the restart enforces neither policy: %v", f.Node, err)
		}
	}
	for _, name := range b.Nodes {
		if _, ok := rec.Reconnected[name]; !ok {
			backends, _ := l.cluster.Node(name).Backends(ctx, podrun.ClusterIP, 443)
			t.Logf("without the extension, the agent on %s has not reconnected within %s; its load balancer sends the ClusterIP to %v", name, baselineWindow, backends)
		}
	}
}

// startPolicyScenario starts the policy scenario name on nodes, removed when t ends.
func startPolicyScenario(t *testing.T, l *lane, name string, nodes []string) *ciliumnodes.PolicyScenario {
	t.Helper()
	s, err := l.cluster.StartPolicyScenario(context.Background(), name, nodes, t.Logf)
	t.Cleanup(s.Stop)
	if err != nil {
		t.Fatalf("before the restarts: %v", err)
	}
	return s
}
