// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/apiserverendpoints"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/cilium"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/ciliumchart"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/testenv"
)

const (
	// burstPods is the DaemonSet controller's BurstReplicas: the most pods it creates in one sync
	// (k8s.io/kubernetes pkg/controller/daemon/daemon_controller.go), what a rollout of 1,000 nodes sends at once
	// within networking-cilium's maxUnavailable.
	burstPods = 250
	// burstRounds is how often each way's burst is repeated, interleaved with the other ways.
	burstRounds = 3
)

// wayGeneric admits the agent's pods with Gardener's generic handler and the extension's mutator, in a process of its
// own as the extension's handler is. It measured the extension's own handler against Gardener's
// (docs/development/webhook-handler.md); since the extension moved to Gardener's, both ways run the same handler.
var wayGeneric = way{name: "Gardener's generic handler with the extension's mutator", app: "bench-generic"}

// rolloutBurst creates pods bursts times per way as the DaemonSet controller creates a burst: in slow-start batches of
// 1, 2, 4, ... at once (pkg/controller/daemon slowStartBatch, SlowStartInitialBatchSize 1), and reports each way's
// create latencies, p50, p99 and max, and the burst's duration.
func rolloutBurst(ctx context.Context, r *report, env *testenv.Env, f *fixture, pods, rounds int) error {
	admitted := &appsv1.DaemonSet{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(f.rendered.Agent), admitted); err != nil {
		return err
	}
	ws, stop, err := startFloorsProcess(ctx, env.Dir, nil)
	if err != nil {
		return err
	}
	defer stop()
	floors := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "bench-burst"},
		Webhooks:   []admissionregistrationv1.MutatingWebhook{benchWebhook(ws, wayGeneric.app, "/generic")},
	}
	if err := env.Client.Create(ctx, floors); err != nil {
		return err
	}
	defer func() { _ = env.Client.Delete(context.Background(), floors) }()
	ways := []way{wayOurs, wayGeneric, wayNone}
	latencies, durations := map[way][]time.Duration{}, map[way][]time.Duration{}
	for round := range rounds {
		for _, w := range ways {
			took, lat, err := burst(ctx, env, admitted, w, fmt.Sprintf("%s-burst-%d", w.app, round), pods)
			if err != nil {
				return err
			}
			latencies[w], durations[w] = append(latencies[w], lat...), append(durations[w], took)
			if err := sameAdmission(ctx, env, w, fmt.Sprintf("%s-burst-%d", w.app, round)); err != nil {
				return err
			}
			if err := env.Client.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace("kube-system"),
				client.MatchingLabels{"k8s-app": w.app}, client.GracePeriodSeconds(0)); err != nil {
				return err
			}
		}
	}
	const section = "13. A rollout's burst of agent pod creations through kube-apiserver (envtest)"
	for _, w := range ways {
		name := fmt.Sprintf("create latency in bursts of %d pods, %s", pods, w.name)
		for _, q := range []struct {
			name string
			q    float64
		}{{"p50", 0.5}, {"p99", 0.99}, {"max", 1}} {
			res := Result{Section: section, Name: q.name + " " + name, Value: ms(quantile(latencies[w], q.q)), Unit: "ms"}
			if w != wayNone {
				res.Baseline, res.BaselineName = ms(quantile(latencies[wayNone], q.q)), "no webhook"
			}
			r.add(res)
		}
		r.add(Result{Section: section, Name: fmt.Sprintf("median burst of %d pods, first create to last, %s", pods, w.name),
			Value: ms(quantile(durations[w], 0.5)), Unit: "ms"})
	}
	return nil
}

// burst creates pods of the admitted DaemonSet labelled for w, named prefix-N, spread over the fixture's nodes, in
// slow-start batches, and returns how long the burst took and each create's latency.
func burst(ctx context.Context, env *testenv.Env, admitted *appsv1.DaemonSet, w way, prefix string, pods int) (time.Duration, []time.Duration, error) {
	nodes := []string{"cp-0", "cp-1", "cp-2", "worker-0"}
	var (
		mu        sync.Mutex
		latencies []time.Duration
		errs      []error
	)
	start := time.Now()
	for done, batch := 0, 1; done < pods; done, batch = done+batch, min(2*batch, pods-done-batch) {
		var wg sync.WaitGroup
		for i := done; i < done+batch; i++ {
			pod := ciliumchart.DaemonSetPod(admitted, nodes[i%len(nodes)])
			pod.GenerateName, pod.Name = "", fmt.Sprintf("%s-%d", prefix, i)
			pod.Labels["k8s-app"] = w.app
			wg.Go(func() {
				began := time.Now()
				err := env.Client.Create(ctx, pod)
				mu.Lock()
				defer mu.Unlock()
				latencies = append(latencies, time.Since(began))
				if err != nil {
					errs = append(errs, err)
				}
			})
		}
		wg.Wait()
		if len(errs) > 0 {
			return 0, nil, fmt.Errorf("creating %s's pods: %w", w.name, errs[0])
		}
	}
	return time.Since(start), latencies, nil
}

// sameAdmission checks that a way with a webhook pinned its pods as the extension's handler does: the control-plane
// pod to localhost, the worker's to the server name.
func sameAdmission(ctx context.Context, env *testenv.Env, w way, prefix string) error {
	if w == wayNone {
		return nil
	}
	for i, want := range map[int]string{0: apiserverendpoints.LocalHost, 3: apiserverendpoints.ServerName} {
		pod := &corev1.Pod{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: fmt.Sprintf("%s-%d", prefix, i)}, pod); err != nil {
			return err
		}
		agent := pod.Spec.Containers[slices.IndexFunc(pod.Spec.Containers, func(c corev1.Container) bool { return c.Name == cilium.AgentContainerName })]
		if !slices.ContainsFunc(agent.Env, func(e corev1.EnvVar) bool { return e.Name == cilium.EnvServiceHost && e.Value == want }) {
			return fmt.Errorf("%s: pod %s on %s was not pinned to %s: %v", w.name, pod.Name, pod.Spec.NodeName, want, agent.Env)
		}
	}
	return nil
}
