// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

// Package datapath runs Cilium's real agents on network-namespace nodes (test/framework/ciliumnodes), exactly as the pods the
// webhook admitted from Gardener's and upstream's charts would run them, and observes where they connect, that the
// exposure's VIP is announced and serves kube-apiserver, and how it fails over.
//
// The cases run on lanes, one per Cilium line: a control plane with its extension and a cluster of agents of its own,
// started once for the suite. The lanes run side by side; on a lane, one case at a time (lane.hold).
package datapath

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/ciliumbin"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/ciliumchart"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/ciliumnodes"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/fixtures"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/frr"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/podrun"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/testenv"
)

// newestLine is the newest Cilium release the webhook supports, whose agents and operator run from upstream's chart
// beside Gardener's 1.19.
var newestLine = ciliumchart.Versions[len(ciliumchart.Versions)-1]

// lane is a control plane with its extension and a cluster of agents that runs one Cilium line.
type lane struct {
	// line is the chart installed in the lane's cluster, whose agents its cases run unless a case says otherwise.
	line   ciliumnodes.Chart
	suffix string
	env    *testenv.Env
	// cluster is started by the first case that holds the lane, startErr why it did not start.
	cluster  *ciliumnodes.Cluster
	startErr error
	mu       sync.Mutex
}

var (
	// gardenerLane runs Gardener's chart (Cilium 1.19), which real shoots get; the cases of one line run there unless
	// they balance the lanes' times.
	gardenerLane = &lane{line: ciliumnodes.GardenerChart, suffix: "g"}
	// newestLane runs upstream's chart of newestLine.
	newestLane = &lane{line: ciliumnodes.Upstream(newestLine), suffix: "n"}
	lanes      = []*lane{gardenerLane, newestLane}
)

// hold runs t alongside the cases of other lanes and alone on l: l is t's until t and its cleanups end. The first case
// to hold l starts its cluster, so that a suite run for one case starts only its lane's. The lane is settled before
// and after the case (settle), and t fails when the case left it changed.
func (l *lane) hold(t *testing.T) {
	t.Parallel()
	waiting := time.Now()
	l.mu.Lock()
	t.Cleanup(l.mu.Unlock)
	if l.cluster == nil && l.startErr == nil {
		l.cluster, l.startErr = ciliumnodes.New(context.Background(), l.env, prefix+"-"+l.suffix, ciliumnodes.Options{ExtensionPods: true, Stored: l.line})
	}
	if l.startErr != nil {
		t.Fatalf("starting the lane of %s: %v", l.line, l.startErr)
	}
	before, err := l.settle()
	if err != nil {
		t.Fatal(err)
	}
	held, starts := time.Now(), l.cluster.AgentStarts()
	t.Logf("on the lane of %s after %s", l.line, held.Sub(waiting).Round(100*time.Millisecond))
	t.Cleanup(func() {
		after, err := l.settle()
		if err != nil {
			t.Fatal(err)
		}
		for _, change := range before.Changes(after) {
			t.Errorf("the case left its lane changed: %s", change)
		}
		t.Logf("held the lane of %s for %s, %d agents started", l.line, time.Since(held).Round(100*time.Millisecond), l.cluster.AgentStarts()-starts)
	})
}

// settle brings the lane where every case starts: its line's agents running with the exposure's settings, the
// extension's pods with their chart's arguments and one of them leading, the exposure made; and takes its snapshot. A
// case's Run then restarts only what it needs otherwise, and a node a case let die comes back here at the latest.
func (l *lane) settle() (ciliumnodes.Snapshot, error) {
	ctx := context.Background()
	if err := l.run(ctx, ciliumnodes.Agents{}); err != nil {
		return nil, err
	}
	if err := l.cluster.ExtensionArgs(ctx); err != nil {
		return nil, err
	}
	if _, err := l.cluster.L2().Expose(ctx); err != nil {
		return nil, err
	}
	// The extension's controllers run, also after a case restarted kube-apiserver.
	if err := l.cluster.WaitForExtensionLeader(ctx); err != nil {
		return nil, err
	}
	return l.cluster.Snapshot(ctx)
}

// onEachLane runs f on every lane at once, each as a subtest named after the lane's line.
func onEachLane(t *testing.T, f func(*testing.T, *lane)) {
	t.Parallel()
	for _, l := range lanes {
		t.Run(string(l.line), func(t *testing.T) {
			l.hold(t)
			f(t, l)
		})
	}
}

// run makes the lane's agents run as want says, of the lane's line unless want names a chart.
func (l *lane) run(ctx context.Context, want ciliumnodes.Agents) error {
	if want.Chart == "" {
		want.Chart = l.line
	}
	_, err := l.cluster.Run(ctx, want)
	return err
}

// prefix names what the suite creates on the machine: namespaces and its cgroup.
var prefix = "cdp" + strconv.Itoa(os.Getpid())

func TestMain(m *testing.M) {
	if err := testenv.Check(ciliumnodes.Available, ciliumchart.GardenerChart, ciliumbin.Built(ciliumbin.Agent, ciliumbin.Dbg, ciliumbin.Operator, ciliumbin.CNI),
		ciliumbin.BuiltFor(newestLine, ciliumbin.Agent, ciliumbin.Dbg, ciliumbin.Operator, ciliumbin.CNI)); err != nil {
		os.Exit(testenv.CannotRun(err))
	}
	// Every case waiting for its lane holds a slot of -parallel: there must be enough for each lane to have one free.
	flag.Parse()
	if err := flag.Set("test.parallel", "64"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	certs, err := podrun.ShootCertificates("shoot--local--datapath")
	if err != nil {
		os.Exit(testenv.CannotRun(err))
	}
	var agents []string
	for _, image := range []string{"cilium:v" + ciliumchart.GardenerVersion, "cilium:v" + newestLine} {
		agent, err := ciliumbin.PathFor(ciliumbin.Agent, image)
		if err != nil {
			os.Exit(testenv.CannotRun(err))
		}
		agents = append(agents, agent)
	}
	// The router's daemons too: they run in the suite's namespaces and cgroup only (test/framework/frr).
	agents = append(agents, frr.Zebra, frr.Bgpd)
	before, err := ciliumnodes.SnapshotHost()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// One process for every lane: the machine's check below would see another suite's namespaces and agents.
	code := testenv.RunSuiteOn(m, len(lanes), fixtures.WithExposureConfig(fixtures.Shoot(true), fixtures.ExposureConfigL2), testenv.Options{Certificates: certs}, setup)
	problems, err := before.Leftovers(prefix, agents...)
	if err != nil {
		problems = append(problems, err.Error())
	}
	for _, p := range problems {
		fmt.Fprintln(os.Stderr, "FAIL: left behind on the machine:", p)
		code = 1
	}
	os.Exit(code)
}

func setup(_ context.Context, envs []*testenv.Env) (func(), error) {
	for i, l := range lanes {
		l.env = envs[i]
	}
	// Every agent copies its BPF sources from the module cache, which the suite sees under /tmp from here on, as on a
	// CI runner with GOMODCACHE=/tmp/...: the agents' containers hide the machine's /tmp.
	restoreCache, err := testenv.ModuleCacheUnderTmp(prefix+"-gomodcache", ciliumchart.Module(ciliumchart.GardenerVersion), ciliumchart.Module(newestLine))
	if err != nil {
		return nil, err
	}
	return func() {
		var closing sync.WaitGroup
		for _, l := range lanes {
			if l.cluster != nil {
				closing.Go(l.cluster.Close)
			}
		}
		closing.Wait()
		restoreCache()
	}, nil
}

// showExtensionLogsOnFailure shows the end of every extension pod's log of l, and of the one before it on each node,
// when t fails.
func showExtensionLogsOnFailure(t *testing.T, l *lane) {
	t.Cleanup(func() {
		if t.Failed() {
			for _, n := range l.cluster.Nodes() {
				if !n.ControlPlane {
					continue
				}
				if previous := n.PreviousExtensionLogTail(100); previous != "" {
					t.Logf("--- the extension pod on %s before the running one ---\n%s", n.Name, previous)
				}
				t.Logf("--- the extension pod on %s ---\n%s", n.Name, n.ExtensionLogTail(200))
			}
		}
	})
}
