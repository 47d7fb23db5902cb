package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/ciliumnodes"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/testenv"
)

const restartSection = "12. NetworkPolicy through kube-apiserver restarts, with and without the extension (real agents, workload pods through Cilium's CNI plugin; issue 44)"

// restartNodes are the nodes of section 12's pods: the one control-plane node whose kube-apiserver restarts, a worker.
var restartNodes = []string{ciliumnodes.BaselineControlPlane, "worker-0"}

// baselineWindow is how long section 12 watches the baseline's agents after a restart.
const baselineWindow = 2 * time.Minute

// restartKind is how kube-apiserver restarts: as kubelet restarts its static pod, or killed with a minute's outage.
type restartKind struct {
	name    string
	restart func(*testenv.Env) error
}

var restartKinds = []restartKind{
	{"graceful", func(e *testenv.Env) error { return e.RestartAPIServer(10 * time.Second) }},
	{"killed, a minute down", func(e *testenv.Env) error { return e.KillAPIServer(time.Minute) }},
}

// policyRestarts runs section 12 with Gardener's chart: per way of restarting, runs times with the extension, the
// time from kube-apiserver healthy to every node enforcing a policy turned around right then and reaching a new pod,
// and how often the policy broke during the outage; then once per way without the extension (the baseline of
// test/agents/datapath TestBaselineWithoutExtension), what recovered within baselineWindow.
func policyRestarts(r *report, runs int) error {
	return withCiliumNodes(r, "12", "rsbench", func(ctx context.Context, env *testenv.Env, cluster *ciliumnodes.Cluster) error {
		if _, err := cluster.Run(ctx, ciliumnodes.Agents{}); err != nil {
			return err
		}
		for _, kind := range restartKinds {
			var converged []time.Duration
			violations := 0
			for range runs {
				took, broke, err := restartWithExtension(ctx, env, cluster, kind)
				if err != nil {
					return fmt.Errorf("%s restart: %w", kind.name, err)
				}
				converged, violations = append(converged, took...), violations+broke
			}
			if len(converged) == 0 {
				continue
			}
			addQuantiles(r, restartSection, "every node enforcing the policy turned around and reaching a new pod, from kube-apiserver healthy", kind.name+", with the extension", converged, Result{})
			r.add(Result{Section: restartSection, Name: "allowed connections failing or denied ones not dropped during the outage, " + kind.name + ", with the extension, all runs", Value: float64(violations), Unit: "count"})
		}
		// The baseline is expected to misbehave: what it did not get through is noted, and the report is kept.
		if err := baselineRestarts(ctx, r, env, cluster); err != nil {
			r.Notes = append(r.Notes, "Section 12's baseline did not finish: "+err.Error())
			fmt.Println("   baseline:", err)
		}
		return nil
	})
}

// restartWithExtension restarts kube-apiserver once under the policy scenario and returns, per node, the time from
// kube-apiserver healthy to the turned-around policy enforced and the new pod reached, and the policy's violations.
func restartWithExtension(ctx context.Context, env *testenv.Env, cluster *ciliumnodes.Cluster, kind restartKind) ([]time.Duration, int, error) {
	s, err := cluster.StartPolicyScenario(ctx, restartNodes, nil)
	defer s.Stop()
	if err != nil {
		return nil, 0, err
	}
	healthy, violations, err := s.Through(func() error { return restartAPIServer(env, cluster, kind) })
	if err != nil {
		return nil, 0, err
	}
	if err := s.TurnAround(ctx); err != nil {
		return nil, 0, err
	}
	took := make([]time.Duration, len(s.Flows))
	errs := make([]error, len(s.Flows))
	var wg sync.WaitGroup
	for i, f := range s.Flows {
		wg.Go(func() {
			var at time.Time
			at, errs[i] = f.EnforcedAfterTurn(ctx, 3*time.Minute)
			took[i] = at.Sub(healthy)
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, 0, err
		}
	}
	fmt.Printf("   %s: converged after %v, %d violations\n", kind.name, took, len(violations))
	return took, len(violations), nil
}

// baselineRestarts runs each way of restarting once without the extension: kube-apiserver advertising the
// control-plane node, the agents as networking-cilium renders them on the ClusterIP, bootstrapped afresh each time.
func baselineRestarts(ctx context.Context, r *report, env *testenv.Env, cluster *ciliumnodes.Cluster) error {
	controlPlane := cluster.Node(ciliumnodes.BaselineControlPlane)
	advertised, err := controlPlane.ServeAdvertised()
	if err != nil {
		return err
	}
	if err := env.Advertise(ctx, controlPlane.IP); err != nil {
		return err
	}
	if err := cluster.RestartKubernetes(); err != nil {
		return err
	}
	defer func() { _ = env.Advertise(context.Background(), testenv.AdvertiseAddress) }()
	for _, kind := range restartKinds {
		if _, err := cluster.Run(ctx, ciliumnodes.Agents{Baseline: true, Afresh: true}); err != nil {
			return err
		}
		for _, n := range cluster.Nodes() {
			if err := testenv.WaitFor(ctx, 2*time.Minute, func(context.Context) (bool, error) { return n.ThroughClusterIP(ctx, advertised), nil }); err != nil {
				return fmt.Errorf("the baseline agent on %s is not connected through the ClusterIP: %w", n.Name, err)
			}
		}
		s, err := cluster.StartPolicyScenario(ctx, restartNodes, nil)
		if err != nil {
			s.Stop()
			return err
		}
		healthy, violations, err := s.Through(func() error { return restartAPIServer(env, cluster, kind) })
		if err == nil {
			err = env.WaitForAdvertised(ctx, controlPlane.IP)
		}
		if err == nil {
			err = s.TurnAround(ctx)
		}
		if err != nil {
			s.Stop()
			return err
		}
		reconnected, enforced := 0, 0
		var wg sync.WaitGroup
		var mu sync.Mutex
		for _, n := range cluster.Nodes() {
			wg.Go(func() {
				if testenv.WaitFor(ctx, baselineWindow, func(context.Context) (bool, error) { return n.ThroughClusterIP(ctx, advertised), nil }) == nil {
					mu.Lock()
					reconnected++
					mu.Unlock()
				}
			})
		}
		for _, f := range s.Flows {
			wg.Go(func() {
				if _, err := f.EnforcedAfterTurn(ctx, baselineWindow); err == nil {
					mu.Lock()
					enforced++
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		s.Stop()
		fmt.Printf("   baseline, %s: %d of %d agents reconnected, %d of %d nodes enforcing the turned-around policy within %s (healthy at %s), %d violations\n",
			kind.name, reconnected, len(cluster.Nodes()), enforced, len(s.Flows), baselineWindow, healthy.Format(time.TimeOnly), len(violations))
		r.add(Result{Section: restartSection, Name: fmt.Sprintf("agents reconnected within %s, %s, without the extension", baselineWindow, kind.name), Value: float64(reconnected), Unit: fmt.Sprintf("of %d", len(cluster.Nodes()))})
		r.add(Result{Section: restartSection, Name: fmt.Sprintf("nodes enforcing the policy turned around and reaching a new pod within %s, %s, without the extension", baselineWindow, kind.name), Value: float64(enforced), Unit: fmt.Sprintf("of %d", len(s.Flows))})
	}
	return nil
}

// restartAPIServer restarts kube-apiserver the kind's way, then kube-controller-manager and kube-scheduler as kubelet
// would (ciliumnodes.Cluster.RestartKubernetes).
func restartAPIServer(env *testenv.Env, cluster *ciliumnodes.Cluster, kind restartKind) error {
	if err := kind.restart(env); err != nil {
		return err
	}
	return cluster.RestartKubernetes()
}
