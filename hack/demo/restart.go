// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/ciliumnodes"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/testenv"
)

// restartWindow is how long the demo watches the agents without the extension after kube-apiserver is back.
const restartWindow = 30 * time.Second

// restartResult is one row of the restart table: what broke the policy during the outage, how many agents
// reconnected, nodes enforced the turned-around policy and new pods got their identities, and, with the extension,
// when the last node enforced it from kube-apiserver healthy.
type restartResult struct {
	violations, reconnected, enforcing, identified int
	converged                                      time.Duration
}

// restart shows the failure the extension prevents (docs/development/workload-pods.md): a NetworkPolicy over pods on
// the control-plane node and the worker, kube-apiserver restarted gracefully as kubelet restarts its static pod, the
// policy turned around right after; once with the extension, once without it (networking-cilium's chart as rendered,
// the agents on the `kubernetes` ClusterIP).
func restart(ctx context.Context, cluster *ciliumnodes.Cluster, agents ciliumnodes.Agents) ([]string, error) {
	graceful := ciliumnodes.APIServerRestarts[0]
	step("kube-apiserver restarts (%s, as kubelet restarts its static pod) under a NetworkPolicy over pods on %s, "+
		"turned around right after: with the extension, then without it", graceful.Name, strings.Join(cluster.ScenarioNodes(), ", "))
	if _, err := cluster.Run(ctx, agents); err != nil {
		return nil, err
	}
	with, err := restartWithExtension(ctx, cluster, graceful)
	if err != nil {
		return nil, fmt.Errorf("the restart with the extension: %w", err)
	}
	without, err := restartWithoutExtension(ctx, cluster, graceful)
	if err != nil {
		return nil, fmt.Errorf("the restart without the extension: %w", err)
	}
	nodes, scenario := len(cluster.Nodes()), len(cluster.ScenarioNodes())
	fmt.Println()
	table := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(table, "AFTER KUBE-APISERVER'S RESTART\tPOLICY DURING IT\tAGENTS RECONNECTED\tTURNED-AROUND POLICY ENFORCED\tNEW PODS GOT IDENTITY")
	fmt.Fprintf(table, "with the extension\t%s\t%d of %d\ton every node after %s\t%d of %d\n", held(with.violations), with.reconnected, nodes,
		with.converged.Round(100*time.Millisecond), with.identified, scenario)
	fmt.Fprintf(table, "without (networking-cilium as rendered)\t%s\t%d of %d in %s\ton %d of %d nodes in %s\t%d of %d in %s\n", held(without.violations),
		without.reconnected, nodes, restartWindow, without.enforcing, scenario, restartWindow, without.identified, scenario, restartWindow)
	_ = table.Flush()
	fmt.Println()
	var problems []string
	if with.reconnected != nodes || with.identified != scenario || with.violations > 0 {
		problems = append(problems, fmt.Sprintf("with the extension, after kube-apiserver's restart: %+v", with))
	}
	return problems, nil
}

// held says how the policy fared during the outage.
func held(violations int) string {
	if violations == 0 {
		return "held"
	}
	return fmt.Sprintf("broken %d times", violations)
}

// restartWithExtension restarts kube-apiserver under the policy scenario with the agents as the webhook admitted them.
func restartWithExtension(ctx context.Context, cluster *ciliumnodes.Cluster, r ciliumnodes.APIServerRestart) (restartResult, error) {
	s, err := cluster.StartPolicyScenario(ctx, "restart", cluster.ScenarioNodes(), nil)
	defer s.Stop()
	if err != nil {
		return restartResult{}, err
	}
	conv, err := s.Restart(ctx, r, 3*time.Minute)
	if err != nil {
		return restartResult{}, err
	}
	// Restart returns only once every node enforced the turned-around policy, its new pod identified and reached.
	res := restartResult{violations: len(conv.Violations), enforcing: len(conv.Enforced), identified: len(conv.Enforced),
		converged: slices.Max(slices.Collect(maps.Values(conv.Enforced)))}
	// Every agent's own connection, to localhost on a control-plane node and to a control-plane node elsewhere.
	for _, n := range cluster.Nodes() {
		if testenv.WaitFor(ctx, time.Minute, func(context.Context) (bool, error) {
			peers, err := n.APIServerPeers()
			return len(peers) > 0, err
		}) == nil {
			res.reconnected++
		}
	}
	return res, nil
}

// restartWithoutExtension runs the same restart with the baseline's agents (ciliumnodes.Baseline) and watches what
// recovers within restartWindow.
func restartWithoutExtension(ctx context.Context, cluster *ciliumnodes.Cluster, r ciliumnodes.APIServerRestart) (restartResult, error) {
	b, err := cluster.StartBaseline(ctx, cluster.Names())
	defer func() { _ = b.Stop(context.Background()) }()
	if err != nil {
		return restartResult{}, err
	}
	s, err := cluster.StartPolicyScenario(ctx, "restart", cluster.ScenarioNodes(), nil)
	defer s.Stop()
	if err != nil {
		return restartResult{}, err
	}
	rec, violations, err := b.Restart(ctx, s, r, restartWindow)
	if err != nil {
		return restartResult{}, err
	}
	return restartResult{violations: len(violations), reconnected: len(rec.Reconnected), enforcing: len(rec.Enforcing), identified: len(rec.Identified)}, nil
}
