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

	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/ciliumnodes"
)

// TestPolicyThroughAPIServerRestart: the failure this project exists for (issue 44). Workload pods under a
// NetworkPolicy on the control-plane node and the worker, and the one kube-apiserver restarts: gracefully, as kubelet
// restarts a static pod whose manifest changed (SIGTERM: kube-apiserver takes its address out of the `kubernetes`
// Service first), and killed with a minute's outage (its address stays). Throughout, what the policy allows connects
// and what it denies is dropped, on every node; right after kube-apiserver is back, the policy is turned around and a
// new pod starts on each node, and every node enforces the new policy and reaches the new pods (the time from
// kube-apiserver healthy to enforced is logged per node); every agent is back on its own connection (localhost on the
// control-plane nodes, a control-plane node's address elsewhere) and no node dialled the ClusterIP or the VIP; the
// exposure is Succeeded and a client outside reaches kube-apiserver through the VIP, before and after. On the
// newest line's lane, so that the lanes take about as long: Gardener's runs the baseline without the extension
// (TestBaselineWithoutExtension), and `make bench` section 12 restarts under Gardener's chart.
func TestPolicyThroughAPIServerRestart(t *testing.T) {
	l := newestLane
	l.hold(t)
	ctx := context.Background()
	agentPods, err := l.cluster.Run(ctx, ciliumnodes.Agents{Chart: l.line})
	if err != nil {
		t.Fatal(err)
	}
	// One scenario for both restarts: each turns the policy around.
	s := startPolicyScenario(t, l)
	for _, r := range ciliumnodes.APIServerRestarts {
		t.Run(r.Name, func(t *testing.T) {
			exp := expose(t, l)
			if _, err := l.cluster.L2().WaitUntilServing(ctx, exp); err != nil {
				t.Fatalf("the VIP before the restart: %v", err)
			}
			policyThroughRestart(t, s, r)
			for _, n := range l.cluster.Nodes() {
				assertConnections(t, l.cluster, n, agentPods[n.Name])
			}
			// The VIP path: the exposure Succeeded, and a client outside reaches kube-apiserver through the VIP, which
			// only the announcing node answers.
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
		})
	}
}

// policyThroughRestart restarts kube-apiserver under the policy scenario s: the policy holds throughout, and is turned
// around right after, with a new pod on each node, which every node enforces and reaches.
func policyThroughRestart(t *testing.T, s *ciliumnodes.PolicyScenario, r ciliumnodes.APIServerRestart) {
	conv, err := s.Restart(context.Background(), r, 3*time.Minute)
	for _, v := range conv.Violations {
		t.Errorf("during the restart: %s", v)
	}
	if err != nil {
		t.Errorf("after the restart: %v", err)
	}
	for _, node := range slices.Sorted(maps.Keys(conv.Enforced)) {
		t.Logf("%s enforces the turned-around policy and reaches the new pod %s after kube-apiserver was healthy", node, conv.Enforced[node].Round(100*time.Millisecond))
	}
}

// startPolicyScenario starts the restart cases' pods and policy (Cluster.ScenarioNodes), removed when t ends.
func startPolicyScenario(t *testing.T, l *lane) *ciliumnodes.PolicyScenario {
	t.Helper()
	s, err := l.cluster.StartPolicyScenario(context.Background(), t.Logf)
	t.Cleanup(s.Stop)
	if err != nil {
		t.Fatalf("before the restart: %v", err)
	}
	return s
}
