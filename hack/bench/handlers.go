// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"encoding/json"
	"testing"

	"gomodules.xyz/jsonpatch/v2"
	admissionv1 "k8s.io/api/admission/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	extensionswebhook "github.com/gardener/gardener/extensions/pkg/webhook"
	testutils "github.com/gardener/gardener/pkg/utils/test"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/cilium"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/scheme"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/ciliumchart"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/fixtures"
	"github.com/gardener/gardener-extension-cilium-selfhosted/webhook/apiserveraccess"
)

// noopMutator changes nothing: through Gardener's handler it measures what any mutating webhook of the framework
// pays (decoding, comparing, answering).
type noopMutator struct{}

func (noopMutator) Mutate(context.Context, client.Object, client.Object) error { return nil }

// asAgent hands the mutator section 13's pods as the agent's, which it selects by their k8s-app label: the bench
// labels them otherwise, so that only its own webhook, not the extension's, admits them.
type asAgent struct{ extensionswebhook.Mutator }

func (m asAgent) Mutate(ctx context.Context, newObj, oldObj client.Object) error {
	labels := newObj.GetLabels()
	app := labels["k8s-app"]
	labels["k8s-app"] = cilium.LabelValueAgent
	defer func() { labels["k8s-app"] = app }()
	return m.Mutator.Mutate(ctx, newObj, oldObj)
}

type fixture struct {
	rendered *ciliumchart.Objects
	mutator  extensionswebhook.Mutator
	webhooks map[string]*extensionswebhook.Webhook // by name
	noop     admission.Handler
	// generic is Gardener's generic handler with the extension's own mutator: the candidate in place of the
	// extension's handler (section 13).
	generic   admission.Handler
	allowOnly admission.Handler
	// annotate adds one annotation: the least a webhook that changes the object makes kube-apiserver do.
	annotate admission.Handler
	// replay answers with a fixed patch (only in the floor process, see floors.go).
	replay admission.Handler
	scheme *runtime.Scheme
}

func newFixture(version string) (*fixture, error) {
	rendered, err := ciliumchart.Render(version, ciliumchart.Values(version))
	if err != nil {
		return nil, err
	}
	s := scheme.New()
	objs := []client.Object{fixtures.Cluster(fixtures.Shoot(true)), rendered.Agent.DeepCopy()}
	for _, n := range fixtures.Nodes() {
		objs = append(objs, n)
	}
	c, err := newCacheReads(fake.NewClientBuilder().WithScheme(s).Build(), s, objs)
	if err != nil {
		return nil, err
	}
	mgr := testutils.FakeManager{Scheme: s, Client: c}
	f := &fixture{rendered: rendered, mutator: apiserveraccess.NewMutator(c), webhooks: map[string]*extensionswebhook.Webhook{}, scheme: s}
	for _, add := range []func(manager.Manager) (*extensionswebhook.Webhook, error){
		apiserveraccess.AddAgentWebhook, apiserveraccess.AddOperatorWebhook, apiserveraccess.AddConfigWebhook,
	} {
		wh, err := add(mgr)
		if err != nil {
			return nil, err
		}
		f.webhooks[wh.Name] = wh
	}
	types := []extensionswebhook.Type{{Obj: &corev1.Pod{}}, {Obj: &corev1.ConfigMap{}}, {Obj: &appsv1.DaemonSet{}}, {Obj: &appsv1.Deployment{}}}
	if f.noop, err = extensionswebhook.NewBuilder(mgr, admissionLogger).WithMutator(noopMutator{}, types...).Build(); err != nil {
		return nil, err
	}
	if f.generic, err = extensionswebhook.NewBuilder(mgr, admissionLogger).WithMutator(asAgent{f.mutator}, types...).Build(); err != nil {
		return nil, err
	}
	f.allowOnly = admission.HandlerFunc(func(context.Context, admission.Request) admission.Response { return admission.Allowed("") })
	f.annotate = admission.HandlerFunc(func(context.Context, admission.Request) admission.Response {
		return admission.Patched("", jsonpatch.JsonPatchOperation{Operation: "add", Path: "/metadata/annotations/bench~1patched", Value: "true"})
	})
	return f, nil
}

// request is the AdmissionReview request kube-apiserver sends on creating obj.
func (f *fixture) request(obj client.Object) admission.Request {
	gvk, err := apiutil.GVKForObject(obj, f.scheme)
	if err != nil {
		panic(err)
	}
	raw, err := json.Marshal(obj)
	if err != nil {
		panic(err)
	}
	return admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		UID: "bench", Kind: metav1.GroupVersionKind(gvk), Resource: metav1.GroupVersionResource{Version: gvk.Version},
		Operation: admissionv1.Create, Namespace: obj.GetNamespace(), Object: runtime.RawExtension{Raw: raw},
	}}
}

// microBenchmarks: the mutation alone and the whole admission handler (decode, mutate, JSON patch) on the real
// rendered objects, each beside its floor.
func microBenchmarks(r *report, f *fixture) {
	const section = "1. Mutator micro-benchmarks (real rendered Cilium 1.19.7 objects)"
	ctx := context.Background()
	cases := []struct {
		name    string
		obj     client.Object
		webhook string
	}{
		{"agent DaemonSet", f.rendered.Agent, apiserveraccess.AgentWebhookName},
		{"operator Deployment", f.rendered.Operator, apiserveraccess.OperatorWebhookName},
		{"cilium-config ConfigMap", f.rendered.Config, apiserveraccess.ConfigWebhookName},
		{"agent Pod on a control-plane node", ciliumchart.DaemonSetPod(f.rendered.Agent, "cp-1"), apiserveraccess.AgentWebhookName},
		{"agent Pod on a worker", ciliumchart.DaemonSetPod(f.rendered.Agent, "worker-0"), apiserveraccess.AgentWebhookName},
	}
	for _, tc := range cases {
		mutate := testing.Benchmark(func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				obj := tc.obj.DeepCopyObject().(client.Object)
				if err := f.mutator.Mutate(ctx, obj, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
		copyOnly := testing.Benchmark(func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = tc.obj.DeepCopyObject()
			}
		})
		r.add(Result{Section: section, Name: "mutate " + tc.name, Value: float64(mutate.NsPerOp()), Unit: "ns/op",
			Baseline: float64(copyOnly.NsPerOp()), BaselineName: "deep copy only"})
		r.add(Result{Section: section, Name: "mutate " + tc.name, Value: float64(mutate.AllocedBytesPerOp()), Unit: "B/op",
			Baseline: float64(copyOnly.AllocedBytesPerOp()), BaselineName: "deep copy only"})
		r.add(Result{Section: section, Name: "mutate " + tc.name, Value: float64(mutate.AllocsPerOp()), Unit: "allocs/op",
			Baseline: float64(copyOnly.AllocsPerOp()), BaselineName: "deep copy only"})

		req := f.request(tc.obj)
		handler := f.webhooks[tc.webhook].Webhook
		handle := testing.Benchmark(func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if resp := handler.Handle(ctx, req); !resp.Allowed {
					b.Fatal(resp.Result)
				}
			}
		})
		noop := testing.Benchmark(func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = f.noop.Handle(ctx, req)
			}
		})
		r.add(Result{Section: section, Name: "admission handler " + tc.name, Value: float64(handle.NsPerOp()), Unit: "ns/op",
			Baseline: float64(noop.NsPerOp()), BaselineName: "Gardener generic handler, no-op mutator"})
		r.add(Result{Section: section, Name: "admission handler " + tc.name, Value: float64(handle.AllocedBytesPerOp()), Unit: "B/op",
			Baseline: float64(noop.AllocedBytesPerOp()), BaselineName: "Gardener generic handler, no-op mutator"})
	}
}
