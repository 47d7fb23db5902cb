// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

// Command bench measures the webhook and the exposure against their floors, side by side, and writes a Markdown table
// and JSON under bench/results (make bench).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/ciliumfake"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/ciliumoperator"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/fixtures"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/testenv"
)

var (
	admissionLogger = logf.Log.WithName("bench")
	// only lists the sections to run; profileDir is where CPU profiles go, none when empty.
	only, profileDir string
)

func runs(section string) bool { return slices.Contains(strings.Split(only, ","), section) }

func main() {
	out := flag.String("out", "bench/results", "where to write the results")
	version := flag.String("cilium-version", "1.19.7", "the Cilium chart and operator")
	rerender := flag.String("render", "", "only write the Markdown of an earlier JSON result")
	flag.StringVar(&only, "sections", "1,2,3,4,6,7,8,9,10,11,12,13", "the sections to run (5, memory, comes with 3 and 4)")
	failovers := flag.Int("failovers", 10, "how many failovers section 6 measures per way of dying and lease timing")
	flips := flag.Int("flips", 20, "how often section 7 takes an endpoint's kube-apiserver away and back")
	reconnects := flag.Int("reconnects", 3, "how often section 8 ends a worker agent's connection to kube-apiserver per way and client setting")
	repins := flag.Int("repins", 5, "how often section 9 moves every control-plane node to a new address")
	rollouts := flag.Int("rollouts", 3, "how often section 6 rolls the agent DaemonSet")
	restarts := flag.Int("restarts", 5, "how often section 12 restarts kube-apiserver per way of restarting, with the extension and without")
	withdrawals := flag.Int("withdrawals", 10, "how often section 10 fails a control-plane node per way of failing and timer profile (0: only its outages and graceful-restart cases)")
	flag.StringVar(&profileDir, "profile", "", "write CPU profiles of kube-apiserver during sections 3 and 4 here")
	floorsDir := flag.String("serve-floors", "", "internal: serve section 3's floor webhooks, writing their URL and CA into this directory")
	flag.Parse()
	if *floorsDir != "" {
		logf.SetLogger(zap.New(zap.WriteTo(io.Discard)))
		f, err := newFixture(*version)
		if err == nil {
			err = serveFloors(*floorsDir, f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	if *rerender != "" {
		if err := renderJSON(*rerender, *out); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	logf.SetLogger(zap.New(zap.WriteTo(io.Discard)))

	r := &report{Date: time.Now().UTC().Format("2006-01-02 15:04 MST"), Machine: machine()}
	if err := run(r, *version, counts{failovers: *failovers, flips: *flips, reconnects: *reconnects, repins: *repins, restarts: *restarts, rollouts: *rollouts, withdrawals: *withdrawals}); err != nil {
		fmt.Fprintln(os.Stderr, "bench failed:", err)
		os.Exit(1)
	}
	path, err := r.write(*out)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println("results:", path)
}

// counts say how often the sections with real agents repeat what they measure.
type counts struct{ failovers, flips, reconnects, repins, restarts, rollouts, withdrawals int }

func run(r *report, version string, n counts) error {
	f, err := newFixture(version)
	if err != nil {
		return err
	}
	if runs("1") {
		fmt.Println("==> 1. mutator micro-benchmarks")
		microBenchmarks(r, f)
	}
	if runs("2") {
		fmt.Println("==> 2. admission over HTTPS")
		if err := httpsLoad(r, f); err != nil {
			return err
		}
	}
	if runs("3") || runs("4") || runs("13") {
		if err := inCluster(r, f); err != nil {
			return err
		}
	}
	if runs("6") {
		fmt.Println("==> 6. VIP failover with Cilium's real agents")
		if err := vipFailover(r, n.failovers, n.rollouts); err != nil {
			return err
		}
	}
	if runs("7") {
		fmt.Println("==> 7. endpoint probes")
		if err := endpointProbes(r, n.flips); err != nil {
			return err
		}
	}
	if runs("8") {
		fmt.Println("==> 8. agent reconnects to kube-apiserver")
		if err := agentReconnects(r, n.reconnects); err != nil {
			return err
		}
	}
	if runs("9") {
		fmt.Println("==> 9. agents re-pinned after the control-plane nodes moved")
		if err := agentRepins(r, n.repins); err != nil {
			return err
		}
	}
	if runs("10") {
		fmt.Println("==> 10. BGP withdrawal with Cilium's real agents and FRR")
		if err := bgpWithdrawals(r, n.withdrawals); err != nil {
			return err
		}
	}
	if runs("11") {
		fmt.Println("==> 11. Node status writes through the chart's Node policies")
		if err := nodeWrites(r); err != nil {
			return err
		}
	}
	if runs("12") {
		fmt.Println("==> 12. NetworkPolicy through kube-apiserver restarts, with and without the extension")
		if err := policyRestarts(r, n.restarts); err != nil {
			return err
		}
	}
	return nil
}

// inCluster runs the sections that need the control plane: the extension binary with its production flags (as the
// chart's ServiceAccount) and Cilium's real operator.
func inCluster(r *report, f *fixture) error {
	ctx := context.Background()
	env, err := testenv.Start(testenv.Options{})
	if err != nil {
		return err
	}
	defer env.Stop()
	shoot := fixtures.WithExposureConfig(fixtures.Shoot(true), fixtures.ExposureConfigL2)
	if err := env.CreateSelfHostedShoot(ctx, shoot); err != nil {
		return err
	}
	if err := env.Extensions().Run(ctx, ""); err != nil {
		return err
	}
	extension := env.Extension
	defer extension.Stop(ctx)
	time.Sleep(2 * time.Second)
	memory(r, extension.Pid(), "idle")

	if runs("2") {
		fmt.Println("==> 2. the same load against the extension process")
		if err := loadExtension(ctx, r, env, f, extension.Pid()); err != nil {
			return err
		}
	}

	// Cilium's chart once the webhook is registered, as gardenadm orders it: the extension starts before the network.
	for _, obj := range f.rendered.All {
		if err := env.Client.Create(ctx, obj.DeepCopyObject().(client.Object)); err != nil {
			return err
		}
	}

	if runs("3") {
		fmt.Println("==> 3. pod creation through kube-apiserver")
		stopProfile := profileAPIServer(env, "section-3")
		if err := throughAPIServer(ctx, r, env, f, 400); err != nil {
			return err
		}
		stopProfile()
		memory(r, extension.Pid(), "after section 3 (pods admitted)")
		// Section 4 starts cilium-operator, whose start-up would otherwise work through two thousand pods of no node.
		if err := deleteBenchPods(ctx, env); err != nil {
			return err
		}
	}
	if runs("13") {
		fmt.Println("==> 13. a rollout's burst of pod creations: the extension's handler and Gardener's generic one")
		if err := rolloutBurst(ctx, r, env, f, burstPods, burstRounds); err != nil {
			return err
		}
	}
	if !runs("4") {
		return nil
	}

	var operatorConfig map[string]string
	if os.Getenv("BENCH_OPERATOR_DEBUG") != "" {
		operatorConfig = map[string]string{"debug": "true"}
	}
	operator, err := ciliumoperator.Start(ctx, env, operatorConfig)
	if err != nil {
		return err
	}
	defer operator.Stop(ctx)
	// No agents run in this section: cp-0's is played as the announcer, which Succeeded waits for (section 6 runs
	// real agents).
	announcing, stopAnnouncing := context.WithCancel(ctx)
	defer stopAnnouncing()
	go ciliumfake.Announcer(announcing, env.Client, "cp-0")
	fmt.Println("==> 4. exposure convergence with the real cilium-operator")
	// The logs outlive the control plane's scratch directory, so that a slow figure can be explained afterwards (the
	// extension logs how long applying and LB-IPAM took, kube-apiserver traces requests slower than 500 ms, etcd logs compactions).
	defer keepLogs(map[string]string{
		"extension.log": extension.LogPath(), "cilium-operator.log": operator.LogPath(), "kube-apiserver.log": env.APIServerLog,
		"etcd.log": env.EtcdLog,
	})
	stopProfile := profileAPIServer(env, "section-4")
	if err := exposureConvergence(ctx, r, env); err != nil {
		return fmt.Errorf("%w\n--- extension log (tail) ---\n%s", err, extension.LogTail(30))
	}
	stopProfile()
	memory(r, extension.Pid(), "after section 4 (108 exposures, up to 1000 endpoints)")
	return nil
}

// keepLogs copies the processes' logs into the -profile directory, else into a new temporary one, and says where.
func keepLogs(logs map[string]string) {
	dir := profileDir
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "cilium-selfhosted-bench-logs-"); err != nil {
			fmt.Fprintln(os.Stderr, "keeping the logs:", err)
			return
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "keeping the logs:", err)
		return
	}
	for name, path := range logs {
		b, err := os.ReadFile(path)
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, name), b, 0o644)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "keeping the logs:", err)
		}
	}
	fmt.Println("logs:", dir)
}

// renderJSON rewrites the Markdown of a JSON result, e.g. after its notes were edited.
func renderJSON(path, out string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	r := &report{}
	if err := json.Unmarshal(b, r); err != nil {
		return err
	}
	_, err = r.write(out)
	return err
}
