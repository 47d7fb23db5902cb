package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/gardener/gardener-extension-cilium-selfhosted/test/ciliumnodes"
)

const reconnectSection = "8. A worker's agent reconnecting to kube-apiserver when its control-plane node dies (real agents, test/ciliumnodes)"

// agentReconnects runs section 8: the control-plane node that worker-0's agent is connected to dies (link down, or
// hung: every packet dropped), runs times each, once with the client timeouts the webhook sets in pinned containers
// and once with client-go's and Cilium's defaults, and measures until the agent holds a connection to another
// control-plane node.
func agentReconnects(r *report, runs int) error {
	return withCiliumNodes(r, "8", "crbench", func(ctx context.Context, cluster *ciliumnodes.Cluster) error {
		for _, defaults := range []bool{false, true} {
			for _, death := range []ciliumnodes.Death{ciliumnodes.LinkDown, ciliumnodes.Hung} {
				var after []time.Duration
				for i := range runs {
					if _, err := cluster.Run(ctx, ciliumnodes.Agents{ClientDefaults: defaults}); err != nil {
						return err
					}
					rc, err := cluster.BlackHole(ctx, "worker-0", death, 3*time.Minute)
					if err != nil {
						return err
					}
					fmt.Printf("   defaults %v, node %s, run %d: %s died, connected to %s after %s\n", defaults, death, i+1, rc.From, rc.To, rc.After.Round(100*time.Millisecond))
					after = append(after, rc.After)
				}
				slices.Sort(after)
				clients := "the webhook's client timeouts"
				if defaults {
					clients = "client-go's and Cilium's defaults"
				}
				name := fmt.Sprintf("%s, node %s, %d runs", clients, death, runs)
				r.add(Result{Section: reconnectSection, Name: "reconnected, median, " + name, Value: after[len(after)/2].Seconds(), Unit: "s",
					Baseline: defaultsReconnect.Seconds(), BaselineName: "client-go's HTTP/2 health check (30 s idle + 15 s ping)"})
				r.add(Result{Section: reconnectSection, Name: "reconnected, max, " + name, Value: after[len(after)-1].Seconds(), Unit: "s",
					Baseline: defaultsReconnect.Seconds(), BaselineName: "client-go's HTTP/2 health check (30 s idle + 15 s ping)"})
			}
		}
		return nil
	})
}

// defaultsReconnect is how long client-go's defaults keep an established HTTP/2 connection to a dead peer
// (k8s.io/apimachinery/pkg/util/net/http.go: ReadIdleTimeout 30 s, PingTimeout 15 s).
const defaultsReconnect = 45 * time.Second
