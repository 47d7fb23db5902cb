// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package apiserveraccess

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/prometheus/client_golang/prometheus/testutil"
	gomodulesjsonpatch "gomodules.xyz/jsonpatch/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	extensionswebhook "github.com/gardener/gardener/extensions/pkg/webhook"
	testutils "github.com/gardener/gardener/pkg/utils/test"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/scheme"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/fixtures"
)

// applyOps applies a JSON patch with evanphx/json-patch, as kube-apiserver does.
func applyOps(t *testing.T, raw []byte, ops []gomodulesjsonpatch.JsonPatchOperation) []byte {
	t.Helper()
	if len(ops) == 0 {
		return raw
	}
	b, _ := json.Marshal(ops)
	p, err := jsonpatch.DecodePatch(b)
	if err != nil {
		t.Fatal(err)
	}
	out, err := p.Apply(raw)
	if err != nil {
		t.Fatalf("applying %s: %v", b, err)
	}
	return out
}

// newTestHandler is the handler of every kind over mutator.
func newTestHandler(tb testing.TB, name string, mutator extensionswebhook.Mutator) *handler {
	tb.Helper()
	objs := make([]client.Object, 0, len(kinds))
	for _, k := range kinds {
		objs = append(objs, k.object)
	}
	h, err := newHandler(testutils.FakeManager{Scheme: scheme.New()}, name, mutator, objs...)
	if err != nil {
		tb.Fatal(err)
	}
	return h
}

// TestInternalErrorAllows: whatever fails inside, the answer is allowed without a patch (a denial would be enforced
// whatever the failurePolicy), and the error is counted.
func TestInternalErrorAllows(t *testing.T) {
	broken := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(fixtures.Cluster(fixtures.Shoot(true))).
		WithInterceptorFuncs(interceptor.Funcs{List: func(context.Context, client.WithWatch, client.ObjectList, ...client.ListOption) error {
			return errors.New("cache not started")
		}}).Build()
	h := newTestHandler(t, "cilium-agent", NewMutator(broken))
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "cilium-x", Namespace: "kube-system", Labels: map[string]string{"k8s-app": "cilium"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "cilium-agent", Image: "quay.io/cilium/cilium:v1.19.7"}}}}
	raw, _ := json.Marshal(pod)
	for name, req := range map[string]admission.Request{
		"failed read":        request("Pod", raw, nil),
		"undecodable object": request("Pod", []byte("{"), nil),
	} {
		before := testutil.ToFloat64(admissionErrors.WithLabelValues("cilium-agent"))
		resp := h.Handle(context.Background(), req)
		if !resp.Allowed || len(resp.Patches) != 0 || resp.Patch != nil {
			t.Errorf("%s: allowed=%v with %d patch operations, want allowed without a patch: %v", name, resp.Allowed, len(resp.Patches), resp.Result)
		}
		if after := testutil.ToFloat64(admissionErrors.WithLabelValues("cilium-agent")); after != before+1 {
			t.Errorf("%s: error count went from %v to %v", name, before, after)
		}
	}

	panicking := newTestHandler(t, "cilium-agent", panicMutator{})
	if resp := panicking.Handle(context.Background(), request("Pod", raw, nil)); !resp.Allowed || len(resp.Patches) != 0 {
		t.Errorf("a panic answered %+v, want allowed without a patch", resp.Result)
	}
}

type panicMutator struct{}

func (panicMutator) Mutate(context.Context, client.Object, client.Object) error { panic("bug") }

// TestPatchReplacesOnlyChangedItems: kube-apiserver copies what a patch does not reach without parsing it, so a list of
// the same length is patched item by item (Gardener's handler diffs with gomodules.xyz/jsonpatch CreatePatch).
func TestPatchReplacesOnlyChangedItems(t *testing.T) {
	env := func(host string) []corev1.EnvVar {
		return []corev1.EnvVar{{Name: "A", Value: "1"}, {Name: "KUBERNETES_SERVICE_HOST", Value: host}, {Name: "B", Value: "2"}}
	}
	h := newTestHandler(t, "cilium-agent", changeMutator(func(p *corev1.Pod) { p.Spec.Containers[0].Env = env("localhost") }))
	raw, _ := json.Marshal(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "cilium-x", Namespace: "kube-system"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "cilium-agent", Env: env("api")}}}})
	ops := handle(t, h, "Pod", raw, nil).Patches
	if len(ops) != 1 || ops[0].Operation != "replace" || !strings.HasPrefix(ops[0].Path, "/spec/containers/0/env/1/") {
		t.Errorf("patch %v, want one replace within /spec/containers/0/env/1", ops)
	}
}

// TestPatchRefusesUndocumentedChanges: a mutation that changes anything its kind does not let it change gets no patch:
// the handler answers allowed without changes and counts it.
func TestPatchRefusesUndocumentedChanges(t *testing.T) {
	pod := func() *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "cilium-x", Namespace: "kube-system", Labels: map[string]string{"k8s-app": "cilium"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "cilium-agent", Image: "quay.io/cilium/cilium:v1.19.7"}}}}
	}
	for name, change := range map[string]func(*corev1.Pod){
		"image":           func(p *corev1.Pod) { p.Spec.Containers[0].Image = "evil" },
		"container added": func(p *corev1.Pod) { p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "extra"}) },
		"labels":          func(p *corev1.Pod) { p.Labels["x"] = "y" },
		"node name":       func(p *corev1.Pod) { p.Spec.NodeName = "cp-0" },
		"probe":           func(p *corev1.Pod) { p.Spec.Containers[0].ReadinessProbe = &corev1.Probe{PeriodSeconds: 1} },
	} {
		h := newTestHandler(t, "cilium-agent", changeMutator(change))
		raw, _ := json.Marshal(pod())
		before := testutil.ToFloat64(admissionErrors.WithLabelValues("cilium-agent"))
		if resp := h.Handle(context.Background(), request("Pod", raw, nil)); !resp.Allowed || len(resp.Patches) != 0 {
			t.Errorf("%s: answered %+v with %d operations, want allowed without a patch", name, resp.Result, len(resp.Patches))
		}
		if after := testutil.ToFloat64(admissionErrors.WithLabelValues("cilium-agent")); after != before+1 {
			t.Errorf("%s: error count went from %v to %v", name, before, after)
		}
	}
}

// TestMutable: the paths a patch may touch, per kind.
func TestMutable(t *testing.T) {
	for _, tc := range []struct {
		kind, path string
		want       bool
	}{
		{"Pod", "/spec/containers/0/env/3/value", true},
		{"Pod", "/spec/initContainers/1/args", true},
		{"Pod", "/spec/containers/2/volumeMounts/0", true},
		{"Pod", "/spec/containers/0/command/1", true},
		{"Pod", "/spec/hostAliases/0", true},
		{"Pod", "/spec/volumes", true},
		{"Pod", "/spec/containers/0/image", false},
		{"Pod", "/spec/containers/0", false},
		{"Pod", "/spec/containers/x/env", false},
		{"Pod", "/spec/nodeName", false},
		{"Pod", "/metadata/labels/x", false},
		{"Pod", "/spec/template/spec/volumes", false},
		{"DaemonSet", "/spec/template/spec/containers/0/env", true},
		{"DaemonSet", "/spec/template/spec/containers/0/resources", false},
		{"DaemonSet", "/spec/volumes", false},
		{"Deployment", "/spec/template/spec/hostAliases", true},
		{"ConfigMap", "/data/k8s-api-server", true},
		{"ConfigMap", "/data", true},
		{"ConfigMap", "/metadata/annotations/x", false},
		{"ConfigMap", "/binaryData/x", false},
	} {
		if got := kindNamed(tc.kind).mutable(tc.path); got != tc.want {
			t.Errorf("%s %s: mutable %v, want %v", tc.kind, tc.path, got, tc.want)
		}
	}
}

// changeMutator changes a pod as the function says.
type changeMutator func(*corev1.Pod)

func (m changeMutator) Mutate(_ context.Context, obj, _ client.Object) error {
	m(obj.(*corev1.Pod))
	return nil
}

// TestEveryRegisteredTypeHasAKind: every type a webhook registers in the MutatingWebhookConfiguration is one the kind
// table decodes, selects and patches; otherwise kube-apiserver would send objects that the handler only counts as
// errors.
func TestEveryRegisteredTypeHasAKind(t *testing.T) {
	s := scheme.New()
	mgr := testutils.FakeManager{Scheme: s, Client: fake.NewClientBuilder().WithScheme(s).Build()}
	for _, add := range []func(manager.Manager) (*extensionswebhook.Webhook, error){AddAgentWebhook, AddOperatorWebhook, AddConfigWebhook} {
		wh, err := add(mgr)
		if err != nil {
			t.Fatal(err)
		}
		for _, typ := range wh.Types {
			k := kindOf(typ.Obj)
			if k == nil {
				t.Errorf("webhook %s registers %T, which has no kind", wh.Name, typ.Obj)
				continue
			}
			gvk, err := apiutil.GVKForObject(typ.Obj, s)
			if err != nil || gvk.Kind != k.name || kindNamed(gvk.Kind) != k {
				t.Errorf("webhook %s: %T is %s in the scheme, kind %s in the table (%v)", wh.Name, typ.Obj, gvk.Kind, k.name, err)
			}
		}
	}
}
