// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/ciliumchart"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/testenv"
	"github.com/gardener/gardener-extension-cilium-selfhosted/webhook/apiserveraccess"
)

// way is one way of creating pods in section 3: which webhook admits them (chosen by the k8s-app label; the
// extension's agent webhook selects k8s-app=cilium) and where their spec comes from.
type way struct {
	name, app string
	// fromChart takes the spec from the chart's unmutated DaemonSet, as if the webhook had been down when the
	// DaemonSet was admitted: every pod then needs correcting. Otherwise the spec is the DaemonSet's as kube-apiserver
	// stored it (admitted by the webhook), which is what the DaemonSet controller creates pods from.
	fromChart bool
}

var (
	wayOurs          = way{name: "with the extension's webhook, pods of the admitted DaemonSet", app: "cilium"}
	wayOursCorrected = way{name: "with the extension's webhook, pods of the unmutated chart", app: "cilium", fromChart: true}
	wayNoop          = way{name: "with a no-op webhook", app: "bench-noop"}
	wayPatch         = way{name: "with a webhook adding one annotation", app: "bench-patch"}
	wayNone          = way{name: "without webhook", app: "bench-none"}
	// wayReplay answers with the patch the extension's webhook gives a control-plane pod, computed once beforehand:
	// kube-apiserver's cost of that very patch, without the extension's handler and process.
	wayReplay = way{name: "with a webhook replaying the extension's control-plane patch", app: "bench-replay"}
)

// benchWebhook selects the pods labelled k8s-app=app and sends them to path on the bench's own webhook server.
func benchWebhook(ws *webhookServer, app, path string) admissionregistrationv1.MutatingWebhook {
	return admissionregistrationv1.MutatingWebhook{
		Name:                    app + ".bench.extensions.gardener.cloud",
		AdmissionReviewVersions: []string{"v1"},
		ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: new(ws.url + path), CABundle: ws.caBundle},
		Rules: []admissionregistrationv1.RuleWithOperations{{
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
			Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
		}},
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: "kube-system"}},
		ObjectSelector:    &metav1.LabelSelector{MatchLabels: map[string]string{"k8s-app": app}},
		FailurePolicy:     new(admissionregistrationv1.Ignore),
		SideEffects:       new(admissionregistrationv1.SideEffectClassNone),
		TimeoutSeconds:    new(int32(5)),
	}
}

// throughAPIServer creates pods through kube-apiserver in every way, interleaved, and reports the median latency of
// each.
func throughAPIServer(ctx context.Context, r *report, env *testenv.Env, f *fixture, pods int) error {
	admitted := &appsv1.DaemonSet{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(f.rendered.Agent), admitted); err != nil {
		return err
	}
	resp := f.webhooks[apiserveraccess.AgentWebhookName].Webhook.Handle(ctx, f.request(ciliumchart.DaemonSetPod(admitted, "cp-0")))
	if len(resp.Patches) == 0 {
		return fmt.Errorf("the extension's webhook gives a control-plane pod of the admitted DaemonSet no patch")
	}
	ws, stop, err := startFloorsProcess(ctx, env.Dir, resp.Patches)
	if err != nil {
		return err
	}
	defer stop()
	floors := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "bench-floors"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{
			benchWebhook(ws, wayNoop.app, "/allow"), benchWebhook(ws, wayPatch.app, "/annotate"), benchWebhook(ws, wayReplay.app, "/replay"),
		},
	}
	if err := env.Client.Create(ctx, floors); err != nil {
		return err
	}
	defer func() { _ = env.Client.Delete(context.Background(), floors) }()
	l, err := createInterleaved(ctx, env, f, admitted, pods)
	if err != nil {
		return err
	}
	// A patch that kube-apiserver cannot apply is ignored (failurePolicy Ignore): make sure the floor really patched.
	patched := &corev1.Pod{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: fmt.Sprintf("%s-%d", wayPatch.app, pods)}, patched); err != nil {
		return err
	}
	if patched.Annotations["bench/patched"] != "true" {
		return fmt.Errorf("the annotating webhook did not patch pod %s", patched.Name)
	}
	l.report(r, pods)
	return nil
}

// createLatencies are the latencies of pod creations through kube-apiserver by way, and of the extension's webhook
// and the replaying floor by way and node kind (way.app + "/" + node): on a control-plane node the pod gets its
// localhost patch, on a worker its hostAliases and the server name in place of the template's kubeconfig.
type createLatencies struct {
	byWay  map[way][]time.Duration
	byNode map[string][]time.Duration
}

// createInterleaved creates pods+10 pods in every way, one way after the other, on cp-0 and worker-0 in turn; the
// first ten of each way warm up connections and caches and are not counted.
func createInterleaved(ctx context.Context, env *testenv.Env, f *fixture, admitted *appsv1.DaemonSet, pods int) (createLatencies, error) {
	l := createLatencies{byWay: map[way][]time.Duration{}, byNode: map[string][]time.Duration{}}
	for i := range pods + 10 {
		for _, w := range []way{wayOurs, wayNoop, wayOursCorrected, wayPatch, wayReplay, wayNone} {
			template := admitted
			if w.fromChart {
				template = f.rendered.Agent
			}
			node := []string{"cp-0", "worker-0"}[i%2]
			pod := ciliumchart.DaemonSetPod(template, node)
			pod.GenerateName = ""
			pod.Name = fmt.Sprintf("%s-%d", w.app, i)
			if w.fromChart {
				pod.Name = fmt.Sprintf("%s-chart-%d", w.app, i)
			}
			pod.Labels["k8s-app"] = w.app
			start := time.Now()
			if err := env.Client.Create(ctx, pod); err != nil {
				return l, fmt.Errorf("creating pod %s: %w", pod.Name, err)
			}
			if i >= 10 {
				l.byWay[w] = append(l.byWay[w], time.Since(start))
				if w == wayOurs || w == wayReplay {
					l.byNode[w.app+"/"+node] = append(l.byNode[w.app+"/"+node], time.Since(start))
				}
			}
		}
	}
	return l, nil
}

// report adds section 3's medians, in milliseconds, beside their baselines and goals.
func (l createLatencies) report(r *report, pods int) {
	const section = "3. Pod creation through kube-apiserver (envtest), median of interleaved creations"
	median := func(d []time.Duration) float64 {
		d = slices.Clone(d)
		slices.Sort(d)
		return float64(d[len(d)/2].Microseconds()) / 1000
	}
	ours, corrected, noop, patch, none := median(l.byWay[wayOurs]), median(l.byWay[wayOursCorrected]), median(l.byWay[wayNoop]),
		median(l.byWay[wayPatch]), median(l.byWay[wayNone])
	name := fmt.Sprintf("median create latency of %d pods ", pods)
	// The goal is judged per node kind below: the median of both kinds together falls between the two.
	r.add(Result{Section: section, Name: name + wayOurs.name + ", both node kinds", Value: ours, Unit: "ms", Baseline: noop, BaselineName: "no-op webhook"})
	oursCP, oursWorker, replayCP := median(l.byNode[wayOurs.app+"/cp-0"]), median(l.byNode[wayOurs.app+"/worker-0"]), median(l.byNode[wayReplay.app+"/cp-0"])
	r.add(Result{Section: section, Name: name + wayOurs.name + ", worker nodes (hostAliases patch)", Value: oursWorker, Unit: "ms", Baseline: patch, BaselineName: "webhook adding one annotation",
		Goal: "<= 1.1x the annotating webhook", Met: met(oursWorker <= 1.1*patch)})
	r.add(Result{Section: section, Name: name + wayOurs.name + ", control-plane nodes (localhost patch)", Value: oursCP, Unit: "ms", Baseline: patch, BaselineName: "webhook adding one annotation",
		Goal: "<= 1.1x the annotating webhook", Met: met(oursCP <= 1.1*patch)})
	r.add(Result{Section: section, Name: name + wayOurs.name + ", control-plane nodes (localhost patch)", Value: oursCP, Unit: "ms", Baseline: replayCP,
		BaselineName: "webhook replaying the same patch precomputed"})
	r.add(Result{Section: section, Name: name + wayReplay.name + ", control-plane nodes", Value: replayCP, Unit: "ms", Baseline: patch, BaselineName: "webhook adding one annotation"})
	r.add(Result{Section: section, Name: name + wayOursCorrected.name, Value: corrected, Unit: "ms", Baseline: patch, BaselineName: "webhook adding one annotation",
		Goal: "<= 1.1x the annotating webhook", Met: met(corrected <= 1.1*patch)})
	r.add(Result{Section: section, Name: name + wayOursCorrected.name, Value: corrected, Unit: "ms", Baseline: noop, BaselineName: "no-op webhook"})
	r.add(Result{Section: section, Name: name + wayPatch.name, Value: patch, Unit: "ms", Baseline: noop, BaselineName: "no-op webhook"})
	r.add(Result{Section: section, Name: name + wayNoop.name, Value: noop, Unit: "ms", Baseline: none, BaselineName: "no webhook"})
	r.add(Result{Section: section, Name: name + wayOurs.name, Value: ours, Unit: "ms", Baseline: none, BaselineName: "no webhook"})
}

// deleteBenchPods deletes the pods of section 3 at once: no kubelet would ever confirm a graceful deletion.
func deleteBenchPods(ctx context.Context, env *testenv.Env) error {
	apps := []string{}
	for _, w := range []way{wayOurs, wayNoop, wayPatch, wayReplay, wayNone} {
		apps = append(apps, w.app)
	}
	selector, err := labels.Parse("k8s-app in (" + strings.Join(apps, ",") + ")")
	if err != nil {
		return err
	}
	return env.Client.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace("kube-system"),
		client.MatchingLabelsSelector{Selector: selector}, client.GracePeriodSeconds(0))
}

// residentMiB reads fields of a process's memory accounting in MiB: VmRSS, VmHWM, RssAnon and RssFile from its status,
// FilePmdMapped from smaps_rollup.
func residentMiB(pid int) map[string]float64 {
	values := map[string]float64{}
	for _, file := range []string{"status", "smaps_rollup"} {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/" + file)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			fields := strings.Fields(line)
			if len(fields) < 2 {
				continue
			}
			if kb, err := strconv.ParseFloat(fields[1], 64); err == nil {
				values[strings.TrimSuffix(fields[0], ":")] = kb / 1024
			}
		}
	}
	return values
}

// memory reports the extension's resident set, split into its own memory (anonymous: heap, stacks) and the pages of
// its executable mapped from the page cache. Where the page cache holds the executable in large folios (this machine:
// ext4 on 6.18) a fault maps a whole folio, up to 2 MiB (FilePmdMapped), so that the file-backed part approaches the
// size of all code and read-only data touched anywhere in each folio.
func memory(r *report, pid int, when string) {
	const section = "5. Memory of the extension process"
	m := residentMiB(pid)
	r.add(Result{Section: section, Name: "resident set " + when, Value: m["VmRSS"], Unit: "MiB"})
	r.add(Result{Section: section, Name: "peak resident set (VmHWM) " + when, Value: m["VmHWM"], Unit: "MiB"})
	r.add(Result{Section: section, Name: "resident set " + when + ", anonymous (heap, stacks)", Value: m["RssAnon"], Unit: "MiB"})
	r.add(Result{Section: section, Name: "resident set " + when + ", the executable's file pages", Value: m["RssFile"], Unit: "MiB"})
	r.add(Result{Section: section, Name: "resident set " + when + ", of which mapped in 2 MiB folios", Value: m["FilePmdMapped"], Unit: "MiB"})
}
