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
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gardener/gardener-extension-cilium-selfhosted/test/ciliumchart"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/testenv"
)

// appLabelForWay is the k8s-app label of the pods of each way: ours (the extension's agent webhook selects
// k8s-app=cilium), a webhook that only answers allowed, and none.
var appLabelForWay = map[string]string{"with the extension's webhook": "cilium", "with a no-op webhook": "bench-noop", "without webhook": "bench-none"}

// throughAPIServer creates pods through kube-apiserver three ways, interleaved, and reports the median latency of
// each.
func throughAPIServer(ctx context.Context, r *report, env *testenv.Env, f *fixture, ws *webhookServer, pods int) error {
	const section = "3. Pod creation through kube-apiserver (envtest), median of interleaved creations"
	noop := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "bench-noop"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:                    "noop.bench.extensions.gardener.cloud",
			AdmissionReviewVersions: []string{"v1"},
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: new(ws.url + "/allow"), CABundle: ws.caBundle},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
			}},
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: "kube-system"}},
			ObjectSelector:    &metav1.LabelSelector{MatchLabels: map[string]string{"k8s-app": "bench-noop"}},
			FailurePolicy:     new(admissionregistrationv1.Ignore),
			SideEffects:       new(admissionregistrationv1.SideEffectClassNone),
			TimeoutSeconds:    new(int32(5)),
		}},
	}
	if err := env.Client.Create(ctx, noop); err != nil {
		return err
	}
	defer func() { _ = env.Client.Delete(context.Background(), noop) }()

	ways := []string{"with the extension's webhook", "with a no-op webhook", "without webhook"}
	latencies := map[string][]time.Duration{}
	for i := range pods + 10 {
		for _, way := range ways {
			pod := ciliumchart.DaemonSetPod(f.rendered.Agent, []string{"cp-0", "worker-0"}[i%2])
			pod.GenerateName = ""
			pod.Name = fmt.Sprintf("%s-%d", appLabelForWay[way], i)
			pod.Labels["k8s-app"] = appLabelForWay[way]
			start := time.Now()
			if err := env.Client.Create(ctx, pod); err != nil {
				return fmt.Errorf("creating pod %s: %w", pod.Name, err)
			}
			if i >= 10 { // the first ten of each way warm up connections and caches
				latencies[way] = append(latencies[way], time.Since(start))
			}
		}
	}
	median := func(way string) float64 {
		l := slices.Clone(latencies[way])
		slices.Sort(l)
		return float64(l[len(l)/2].Microseconds()) / 1000
	}
	ours, noopMs, none := median(ways[0]), median(ways[1]), median(ways[2])
	name := fmt.Sprintf("median create latency of %d pods", pods)
	r.add(Result{Section: section, Name: name + " " + ways[0], Value: ours, Unit: "ms", Baseline: noopMs, BaselineName: "no-op webhook",
		Goal: "<= 1.1x the no-op webhook", Met: met(ours <= 1.1*noopMs)})
	r.add(Result{Section: section, Name: name + " " + ways[1], Value: noopMs, Unit: "ms", Baseline: none, BaselineName: "no webhook"})
	r.add(Result{Section: section, Name: name + " " + ways[0], Value: ours, Unit: "ms", Baseline: none, BaselineName: "no webhook"})
	return nil
}

// rss reads the resident set (current and peak) of a process in MiB.
func rss(pid int) (current, peak float64) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 2 {
			continue
		}
		kb, _ := strconv.ParseFloat(fields[1], 64)
		switch fields[0] {
		case "VmRSS:":
			current = kb / 1024
		case "VmHWM:":
			peak = kb / 1024
		}
	}
	return current, peak
}

func memory(r *report, pid int, when string) {
	current, peak := rss(pid)
	r.add(Result{Section: "5. Memory of the extension process", Name: "resident set " + when, Value: current, Unit: "MiB"})
	r.add(Result{Section: "5. Memory of the extension process", Name: "peak resident set (VmHWM) " + when, Value: peak, Unit: "MiB"})
}
