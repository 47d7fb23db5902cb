// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/ciliumnodes"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/testenv"
)

const reconnectSection = "8. A worker's agent reconnecting to kube-apiserver when its connection ends (real agents, test/framework/ciliumnodes)"

// agentReconnects runs section 8: the connection of worker-0's agent to its control-plane node's kube-apiserver ends,
// runs times each way: the node dies (link down, or hung: nothing in or out of its NIC), its kube-apiserver stops (connections
// closed, port refused), or the connection alone is reset. Each once with the client timeouts the webhook sets in
// pinned containers and once with client-go's and Cilium's defaults; measured until the agent holds a new connection
// (to another control-plane node unless only the connection was reset).
func agentReconnects(r *report, runs int) error {
	return withCiliumNodes(r, "8", "crbench", ciliumnodes.Options{}, func(ctx context.Context, _ *testenv.Env, cluster *ciliumnodes.Cluster) error {
		type way struct {
			name string
			end  func(ctx context.Context) (ciliumnodes.Reconnect, error)
		}
		var ways []way
		for _, death := range []ciliumnodes.Death{ciliumnodes.LinkDown, ciliumnodes.Hung} {
			ways = append(ways, way{"node " + string(death), func(ctx context.Context) (ciliumnodes.Reconnect, error) {
				return cluster.Reconnects().BlackHole(ctx, ciliumnodes.Worker, death, 3*time.Minute)
			}})
		}
		for _, how := range []ciliumnodes.Disconnection{ciliumnodes.APIServerStopped, ciliumnodes.ConnectionReset} {
			ways = append(ways, way{string(how), func(ctx context.Context) (ciliumnodes.Reconnect, error) {
				return cluster.Reconnects().Disconnect(ctx, ciliumnodes.Worker, how, 3*time.Minute)
			}})
		}
		for _, defaults := range []bool{false, true} {
			var clientDefaults []string
			if defaults {
				clientDefaults = []string{ciliumnodes.Worker}
			}
			for _, way := range ways {
				var after []time.Duration
				for i := range runs {
					if _, err := cluster.Run(ctx, ciliumnodes.Agents{ClientDefaults: clientDefaults}); err != nil {
						return err
					}
					rc, err := way.end(ctx)
					if err != nil {
						return err
					}
					fmt.Printf("   defaults %v, %s, run %d: from %s, connected to %s after %s\n", defaults, way.name, i+1, rc.From, rc.To, rc.After.Round(10*time.Millisecond))
					after = append(after, rc.After)
				}
				clients := "the webhook's client timeouts"
				if defaults {
					clients = "client-go's and Cilium's defaults"
				}
				name := fmt.Sprintf("%s, %s, %d runs", clients, way.name, runs)
				baseline := Result{Baseline: defaultsReconnect.Seconds(), BaselineName: "client-go's HTTP/2 health check (30 s idle + 15 s ping)"}
				addQuantiles(r, reconnectSection, "reconnected", name, after, baseline)
			}
		}
		return nil
	})
}

// defaultsReconnect is how long client-go's defaults keep an established HTTP/2 connection to a dead peer
// (k8s.io/apimachinery/pkg/util/net/http.go: ReadIdleTimeout 30 s, PingTimeout 15 s).
const defaultsReconnect = 45 * time.Second

// addQuantiles adds the median and the max of measured, in seconds, with the baseline of like.
func addQuantiles(r *report, section, what, name string, measured []time.Duration, like Result) {
	measured = slices.Sorted(slices.Values(measured))
	for _, q := range []struct {
		name string
		d    time.Duration
	}{{"median", measured[len(measured)/2]}, {"max", measured[len(measured)-1]}} {
		r.add(Result{Section: section, Name: what + ", " + q.name + ", " + name, Value: q.d.Seconds(), Unit: "s",
			Baseline: like.Baseline, BaselineName: like.BaselineName})
	}
}

const repinSection = "9. A worker's agent re-pinned after every control-plane node moved to a new address (real agents; kube-controller-manager's DaemonSet controller and kube-scheduler make the replacement)"

// strandedWindow is how long section 9 watches the worker's agent with re-pinning switched off.
const strandedWindow = time.Minute

// agentRepins runs section 9: every control-plane node moves to a new address, runs times, and worker-0's agent, whose
// pod was pinned to the old ones, is measured until it runs from a new pod and is connected to a current member. Then
// once with re-pinning switched off, for strandedWindow.
func agentRepins(r *report, runs int) error {
	return withCiliumNodes(r, "9", "cpbench", ciliumnodes.Options{}, func(ctx context.Context, env *testenv.Env, cluster *ciliumnodes.Cluster) error {
		if _, err := cluster.Run(ctx, ciliumnodes.Agents{}); err != nil {
			return err
		}
		// moveAll moves every control-plane node to the addresses of set, once worker-0's agent runs from its current
		// pod, and returns that pod and when the last node moved.
		moveAll := func(set int) (*corev1.Pod, time.Time, error) {
			pod, err := cluster.Repins().RunningPod(ctx, ciliumnodes.Worker, 3*time.Minute)
			if err != nil {
				return nil, time.Time{}, err
			}
			for i, n := range cluster.Nodes() {
				if n.ControlPlane {
					if err := cluster.Repins().MoveNode(ctx, n.Name, fmt.Sprintf("10.0.1.%d", 100+3*set+i)); err != nil {
						return nil, time.Time{}, err
					}
				}
			}
			return pod, time.Now(), nil
		}
		var after []time.Duration
		for i := range runs {
			pod, moved, err := moveAll(i)
			if err != nil {
				return err
			}
			rp, err := cluster.Repins().WaitForRepin(ctx, ciliumnodes.Worker, pod.UID, moved, 3*time.Minute)
			if err != nil {
				return err
			}
			fmt.Printf("   run %d: connected to %s (%s) from pod %s after %s\n", i+1, rp.To.Name, rp.To.IP, rp.Pod.Name, rp.After.Round(10*time.Millisecond))
			after = append(after, rp.After)
		}
		withoutName := fmt.Sprintf("re-pinning switched off: still stranded at the end of a %s window", strandedWindow)
		addQuantiles(r, repinSection, "connected to a current member from a new pod", fmt.Sprintf("%d runs", runs), after,
			Result{Baseline: strandedWindow.Seconds(), BaselineName: withoutName})

		if err := env.Extensions().Restart(ctx, false, "--disable-controllers=cilium-repin"); err != nil {
			return err
		}
		pod, moved, err := moveAll(runs)
		if err != nil {
			return err
		}
		if rp, err := cluster.Repins().WaitForRepin(ctx, ciliumnodes.Worker, pod.UID, moved, strandedWindow); err == nil {
			return fmt.Errorf("with re-pinning switched off, the agent was connected to %s from pod %s after %s", rp.To.Name, rp.Pod.Name, rp.After)
		}
		fmt.Printf("   re-pinning off: still stranded after %s\n", strandedWindow)
		r.add(Result{Section: repinSection, Name: withoutName, Value: strandedWindow.Seconds(), Unit: "s",
			Baseline: strandedWindow.Seconds(), BaselineName: "the window (no agent connected)"})
		return nil
	})
}
