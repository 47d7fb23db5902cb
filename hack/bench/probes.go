// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"

	extensionsv1alpha1 "github.com/gardener/gardener/pkg/apis/extensions/v1alpha1"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/exposure/health"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/ciliumchart"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/ciliumfake"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/fixtures"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/podrun"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/testenv"
)

const probesSection = "7. Endpoint probes: the VIP's backends follow kube-apiserver readiness (the extension as its chart's pod, test/framework/podrun)"

// probeGoal is what issue 16 asks of the default settings: an unready kube-apiserver out of the slice within 3 s.
const probeGoal = 3 * time.Second

// endpointProbes runs section 7 in a control plane of its own that serves a certificate made as Gardener makes it: the
// extension runs as its chart's pod in a network namespace whose control-plane addresses are proxies to kube-apiserver
// (test/operator/extensionpod's setup). It measures how long the slice takes to follow cp-1's kube-apiserver
// going away and coming back, flips times, and what probing costs the extension for 3 and 100 endpoints.
func endpointProbes(r *report, flips int) error {
	if os.Getuid() != 0 {
		r.Notes = append(r.Notes, "Section 7 did not run: network namespaces need root.")
		fmt.Println("   skipped: network namespaces need root")
		return nil
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	b, cleanup, err := startProbeBench(ctx)
	defer cleanup()
	if err != nil {
		return err
	}
	// The start's own work settles first.
	if _, _, err := processCost(ctx, b.pod.Pid(), 10*time.Second); err != nil {
		return err
	}
	if err := b.cost(ctx, r, "no exposure (baseline)"); err != nil {
		return err
	}
	nodes := &corev1.NodeList{}
	if err := b.env.Client.List(ctx, nodes); err != nil {
		return err
	}
	var items []*corev1.Node
	for i := range nodes.Items {
		items = append(items, &nodes.Items[i])
	}
	exp := fixtures.Exposure("bare-metal", items)
	if err := b.env.Client.Create(ctx, exp); err != nil {
		return err
	}
	if err := waitPublished(ctx, b.env, exp, b.ips[:3], nil); err != nil {
		return err
	}
	if err := b.cost(ctx, r, "3 probed endpoints"); err != nil {
		return err
	}
	if err := b.flips(ctx, r, exp, flips); err != nil {
		return err
	}
	if err := b.env.Exposures().RequestReconcile(ctx, exp, func(exp *extensionsv1alpha1.SelfHostedShootExposure) {
		for i, ip := range b.ips[3:] {
			exp.Spec.Endpoints = append(exp.Spec.Endpoints, extensionsv1alpha1.ControlPlaneEndpoint{
				NodeName: "extra-" + strconv.Itoa(i), Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}},
			})
		}
	}); err != nil {
		return err
	}
	if err := waitPublished(ctx, b.env, exp, b.ips, nil); err != nil {
		return err
	}
	if err := b.cost(ctx, r, "100 probed endpoints"); err != nil {
		return err
	}
	return b.env.Client.Delete(ctx, exp)
}

// probeBench is section 7's control plane, the network namespace of cp-0 whose 100 control-plane addresses are
// proxies to kube-apiserver, and the extension running there as its chart's pod.
type probeBench struct {
	env     *testenv.Env
	sandbox *podrun.Sandbox
	pod     *podrun.Started
	ips     []string
}

// startProbeBench starts section 7's shoot with Cilium's test doubles, the sandbox and the extension's pod on cp-0;
// cleanup undoes what was started, also after an error.
func startProbeBench(ctx context.Context) (b *probeBench, cleanup func(), err error) {
	var undo []func()
	cleanup = func() {
		for _, u := range slices.Backward(undo) {
			u()
		}
	}
	env, stopShoot, err := startShoot(ctx, "shoot--local--bench-probes")
	if err != nil {
		return nil, cleanup, err
	}
	undo = append(undo, stopShoot)
	fakes, stopFakes := context.WithCancel(ctx)
	undo = append(undo, stopFakes)
	go ciliumfake.LBIPAM(fakes, env.Client)
	go ciliumfake.Announcer(fakes, env.Client, "cp-0")
	if err := ciliumchart.CreateGardenerConfig(ctx, env.Client); err != nil {
		return nil, cleanup, err
	}
	// cp-0, cp-1 and cp-2, then 97 more endpoints for the cost of 100.
	b = &probeBench{env: env}
	for i := range 100 {
		b.ips = append(b.ips, "10.0.20."+strconv.Itoa(i+1))
	}
	apiServer, err := url.Parse(env.Config.Host)
	if err != nil {
		return nil, cleanup, err
	}
	if b.sandbox, err = podrun.NewSandbox(podrun.Network{
		Name: "cilium-bench-probes-" + strconv.Itoa(os.Getpid()), APIServer: apiServer.Host,
		ControlPlaneIPs: b.ips, ClusterIP: podrun.ClusterIP, VIP: fixtures.ExposureVIP, ExternalName: ciliumchart.ExternalHost,
	}); err != nil {
		return nil, cleanup, err
	}
	undo = append(undo, func() { b.sandbox.Close() })
	for i, ip := range b.ips[:3] {
		if err := env.SetInternalIP(ctx, "cp-"+strconv.Itoa(i), ip); err != nil {
			return nil, cleanup, err
		}
	}
	pod, giveBack, err := b.sandbox.TakeOver(ctx, env, "cp-0", b.ips[0], env.Dir, filepath.Join(env.Dir, "extension-pod.log"))
	if err != nil {
		return nil, cleanup, err
	}
	undo = append(undo, func() { _ = giveBack() })
	b.pod = pod
	return b, cleanup, nil
}

// cost adds the extension's CPU and anonymous memory over 10 s, in the state what says.
func (b *probeBench) cost(ctx context.Context, r *report, what string) error {
	cpu, anon, err := processCost(ctx, b.pod.Pid(), 10*time.Second)
	if err != nil {
		return err
	}
	r.add(Result{Section: probesSection, Name: "extension CPU, " + what, Value: cpu, Unit: "% core"})
	r.add(Result{Section: probesSection, Name: "extension anonymous resident memory, " + what, Value: anon, Unit: "MiB"})
	return nil
}

// flips switches cp-1's kube-apiserver off and on again flips times, and adds how long the exposure took to publish
// it as not ready and as ready again.
func (b *probeBench) flips(ctx context.Context, r *report, exp *extensionsv1alpha1.SelfHostedShootExposure, flips int) error {
	cp1 := b.ips[1] + ":443"
	var out, back []time.Duration
	for i := range flips {
		start := time.Now()
		b.sandbox.SwitchOff(cp1)
		if err := waitPublished(ctx, b.env, exp, b.ips[:3], []string{b.ips[1]}); err != nil {
			return err
		}
		out = append(out, time.Since(start))
		start = time.Now()
		if err := b.sandbox.SwitchOn(cp1); err != nil {
			return err
		}
		if err := waitPublished(ctx, b.env, exp, b.ips[:3], nil); err != nil {
			return err
		}
		back = append(back, time.Since(start))
		fmt.Printf("   flip %d: out after %s, back after %s\n", i+1, out[i].Round(10*time.Millisecond), back[i].Round(10*time.Millisecond))
	}
	slices.Sort(out)
	slices.Sort(back)
	settings := health.DefaultSettings
	describe := fmt.Sprintf("default settings (every %s, %d failures, %d successes), %d flips", settings.Interval, settings.FailureThreshold, settings.SuccessThreshold, flips)
	met := out[len(out)-1] < probeGoal
	r.add(Result{Section: probesSection, Name: "cp-1's kube-apiserver refusing: published not ready after, median, " + describe, Value: out[len(out)/2].Seconds(), Unit: "s",
		Baseline: (time.Duration(settings.FailureThreshold) * settings.Interval).Seconds(), BaselineName: "failure threshold x interval"})
	r.add(Result{Section: probesSection, Name: "cp-1's kube-apiserver refusing: published not ready after, max, " + describe, Value: out[len(out)-1].Seconds(), Unit: "s",
		Goal: "< 3 s", Met: &met})
	r.add(Result{Section: probesSection, Name: "cp-1's kube-apiserver back: published ready after, median, " + describe, Value: back[len(back)/2].Seconds(), Unit: "s",
		Baseline: (time.Duration(settings.SuccessThreshold) * settings.Interval).Seconds(), BaselineName: "success threshold x interval"})
	r.add(Result{Section: probesSection, Name: "cp-1's kube-apiserver back: published ready after, max, " + describe, Value: back[len(back)-1].Seconds(), Unit: "s"})
	return nil
}

// waitPublished waits until the exposure publishes exactly addresses, those of notReady as not ready.
func waitPublished(ctx context.Context, env *testenv.Env, exp *extensionsv1alpha1.SelfHostedShootExposure, addresses, notReady []string) error {
	want := map[string]bool{}
	for _, ip := range addresses {
		want[ip] = !slices.Contains(notReady, ip)
	}
	return env.Exposures().WaitForPublished(ctx, exp, want, time.Minute)
}

// processCost is the CPU (percent of a core) the process pid uses over window, and its anonymous resident memory at
// the end, in MiB.
func processCost(ctx context.Context, pid int, window time.Duration) (cpu, anonMiB float64, err error) {
	before, err := cpuTicks(pid)
	if err != nil {
		return 0, 0, err
	}
	select {
	case <-ctx.Done():
		return 0, 0, ctx.Err()
	case <-time.After(window):
	}
	after, err := cpuTicks(pid)
	if err != nil {
		return 0, 0, err
	}
	// USER_HZ is 100 on Linux.
	return float64(after-before) / 100 / window.Seconds() * 100, residentMiB(pid)["RssAnon"], nil
}

// cpuTicks is the user and system time of pid in clock ticks (/proc/<pid>/stat fields 14 and 15).
func cpuTicks(pid int) (int64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The command name may hold spaces; the fields after it start behind the last ')'.
	fields := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	utime, err := strconv.ParseInt(fields[11], 10, 64)
	if err != nil {
		return 0, err
	}
	stime, err := strconv.ParseInt(fields[12], 10, 64)
	return utime + stime, err
}
