// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/ciliumnodes"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/testenv"
)

const restartSection = "12. NetworkPolicy through kube-apiserver restarts, with and without the extension (real agents, workload pods through Cilium's CNI plugin; issue 44)"

// slowConvergence is a convergence after which section 12 prints the node's agent log.
const slowConvergence = 15 * time.Second

// baselineWindow is how long section 12 watches the baseline's agents after a restart: three times the test's, and
// the baseline runs as often as the restarts with the extension.
const baselineWindow = 90 * time.Second

// policyRestarts runs section 12 with Gardener's chart and two workers: per way of restarting, runs times with the
// extension, the time from kube-apiserver healthy to every node enforcing a policy turned around right then and
// reaching a new pod, and how often the policy broke during the outage; then as often without the extension (the
// baseline of test/agents/datapath TestBaselineWithoutExtension), what recovered within baselineWindow.
func policyRestarts(r *report, runs int) error {
	return withCiliumNodes(r, "12", "rsbench", ciliumnodes.Options{SecondWorker: true}, func(ctx context.Context, env *testenv.Env, cluster *ciliumnodes.Cluster) error {
		if _, err := cluster.Run(ctx, ciliumnodes.Agents{}); err != nil {
			return err
		}
		for _, kind := range ciliumnodes.APIServerRestarts {
			var converged []time.Duration
			violations := 0
			for range runs {
				took, broke, err := restartWithExtension(ctx, cluster, kind)
				if err != nil {
					return fmt.Errorf("%s restart: %w", kind.Name, err)
				}
				converged, violations = append(converged, took...), violations+broke
			}
			if len(converged) == 0 {
				continue
			}
			addQuantiles(r, restartSection, "every node enforcing the policy turned around and reaching a new pod, from kube-apiserver healthy", kind.Name+", with the extension", converged, Result{})
			r.add(Result{Section: restartSection, Name: "allowed connections failing or denied ones not dropped during the outage, " + kind.Name + ", with the extension, all runs", Value: float64(violations), Unit: "count"})
		}
		// The baseline is expected to misbehave: what it did not get through is noted, and the report is kept.
		if err := baselineRestarts(ctx, r, cluster, runs); err != nil {
			r.Notes = append(r.Notes, "Section 12's baseline did not finish: "+err.Error())
			fmt.Println("   baseline:", err)
		}
		return nil
	})
}

// restartWithExtension restarts kube-apiserver once under the policy scenario and returns, per node, the time from
// kube-apiserver healthy to the turned-around policy enforced and the new pod reached, and the policy's violations.
func restartWithExtension(ctx context.Context, cluster *ciliumnodes.Cluster, kind ciliumnodes.APIServerRestart) ([]time.Duration, int, error) {
	s, err := cluster.StartPolicyScenario(ctx, "restart", cluster.ScenarioNodes(), nil)
	defer s.Stop()
	if err != nil {
		return nil, 0, err
	}
	conv, err := s.Restart(ctx, kind, 3*time.Minute)
	if err != nil {
		return nil, 0, err
	}
	fmt.Printf("   %s: converged after %v, %d violations\n", kind.Name, conv.Enforced, len(conv.Violations))
	// A slow node's agent says when the policy reached it (docs/development/workload-pods.md, "Measured": the tail).
	for node, took := range conv.Enforced {
		if took > slowConvergence {
			policy := slices.DeleteFunc(strings.Split(cluster.Node(node).AgentLog(), "\n"), func(line string) bool {
				return !strings.Contains(line, "policy-k8s-watcher") && !strings.Contains(line, "reflector") && !strings.Contains(line, "Failed to watch")
			})
			fmt.Printf("   --- the agent on %s, %s after kube-apiserver was healthy (%s): what its policy watcher logged ---\n%s\n", node, took.Round(100*time.Millisecond),
				conv.Healthy.Format("15:04:05.000"), strings.Join(policy[max(0, len(policy)-8):], "\n"))
		}
	}
	return slices.Collect(maps.Values(conv.Enforced)), len(conv.Violations), nil
}

// baselineRestarts runs each way of restarting runs times without the extension (ciliumnodes.Baseline), the agents
// started afresh each time, and counts what recovered within baselineWindow.
func baselineRestarts(ctx context.Context, r *report, cluster *ciliumnodes.Cluster, runs int) error {
	for _, kind := range ciliumnodes.APIServerRestarts {
		var reconnected, enforcing, identified []time.Duration
		agents, flows := 0, 0
		for range runs {
			rec, err := baselineRestart(ctx, cluster, kind)
			if err != nil {
				return fmt.Errorf("%s restart: %w", kind.Name, err)
			}
			reconnected = append(reconnected, slices.Collect(maps.Values(rec.Reconnected))...)
			enforcing = append(enforcing, slices.Collect(maps.Values(rec.Enforcing))...)
			identified = append(identified, slices.Collect(maps.Values(rec.Identified))...)
			agents, flows = agents+len(cluster.Nodes()), flows+len(cluster.ScenarioNodes())
		}
		for _, m := range []struct {
			what     string
			measured []time.Duration
			of       int
		}{
			{"agents reconnected through the ClusterIP", reconnected, agents},
			{"nodes enforcing the policy turned around and reaching a new pod", enforcing, flows},
			{"new pods given the identity of their labels", identified, flows},
		} {
			name := fmt.Sprintf("%s within %s, %s, without the extension, all runs", m.what, baselineWindow, kind.Name)
			r.add(Result{Section: restartSection, Name: name, Value: float64(len(m.measured)), Unit: fmt.Sprintf("of %d", m.of)})
			if len(m.measured) > 0 {
				addQuantiles(r, restartSection, m.what+", from kube-apiserver healthy", kind.Name+", without the extension, those that did", m.measured, Result{})
			}
		}
	}
	return nil
}

// baselineRestart restarts kube-apiserver once under the policy scenario without the extension and returns what
// recovered within baselineWindow.
func baselineRestart(ctx context.Context, cluster *ciliumnodes.Cluster, kind ciliumnodes.APIServerRestart) (ciliumnodes.Recovery, error) {
	b, err := cluster.StartBaseline(ctx, cluster.Names())
	defer func() { _ = b.Stop(context.Background()) }()
	if err != nil {
		return ciliumnodes.Recovery{}, err
	}
	s, err := cluster.StartPolicyScenario(ctx, "restart", cluster.ScenarioNodes(), nil)
	defer s.Stop()
	if err != nil {
		return ciliumnodes.Recovery{}, err
	}
	rec, violations, err := b.Restart(ctx, s, kind, baselineWindow)
	if err != nil {
		return rec, err
	}
	fmt.Printf("   baseline, %s: within %s agents reconnected %v, nodes enforcing the turned-around policy %v, new pods identified %v; %d violations\n",
		kind.Name, baselineWindow, rec.Reconnected, rec.Enforcing, rec.Identified, len(violations))
	return rec, nil
}
