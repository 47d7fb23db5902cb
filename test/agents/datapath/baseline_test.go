// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package datapath

import (
	"context"
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
	b, err := l.cluster.StartBaseline(ctx)
	t.Cleanup(func() {
		if err := b.Stop(context.Background()); err != nil {
			t.Errorf("advertising %s again: %v", testenv.AdvertiseAddress, err)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	s := startPolicyScenario(t, l)
	rec, violations, err := b.Restart(ctx, s, ciliumnodes.APIServerRestarts[0], baselineWindow)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("without the extension, during kube-apiserver's graceful restart: %d violations of the policy %v", len(violations), violations)
	// What it shows, asserted (docs/development/workload-pods.md, "Measured"): for baselineWindow, no agent
	// reconnects, the turned-around policy is not enforced (the old one still is) and the new pods get no identity.
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
	for _, n := range l.cluster.Nodes() {
		if _, ok := rec.Reconnected[n.Name]; !ok {
			backends, _ := n.Backends(ctx, podrun.ClusterIP, 443)
			t.Logf("without the extension, the agent on %s has not reconnected within %s; its load balancer sends the ClusterIP to %v", n.Name, baselineWindow, backends)
		}
	}
}
