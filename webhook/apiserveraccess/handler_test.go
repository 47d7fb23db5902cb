// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package apiserveraccess

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
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

// apply applies ops to original's JSON.
func apply(t *testing.T, original client.Object, ops []gomodulesjsonpatch.JsonPatchOperation) []byte {
	t.Helper()
	raw, _ := json.Marshal(original)
	return applyOps(t, raw, ops)
}

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

// patchOf is the handler's patch from original to mutated, which must be one it allows.
func patchOf(t *testing.T, original, mutated client.Object) []gomodulesjsonpatch.JsonPatchOperation {
	t.Helper()
	ops, err := kindOf(original).patchOf(original, mutated)
	if err != nil {
		t.Fatal(err)
	}
	return ops
}

// TestPatchEqualsTheGenericDiff: the targeted patch gives the same object as the diff of both objects that Gardener's
// generic handler computes, for every kind of change the mutation makes.
func TestPatchEqualsTheGenericDiff(t *testing.T) {
	pod := func(env []corev1.EnvVar, args []string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{Name: "config", Env: env, Args: args}},
			Containers:     []corev1.Container{{Name: "cilium-agent", Env: env}, {Name: "cilium-monitor"}},
		}}
	}
	cm := func(data map[string]string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cilium-config"}, Data: data}
	}
	host := []corev1.EnvVar{{Name: "KUBERNETES_SERVICE_HOST", Value: "api"}}
	for name, tc := range map[string]struct{ original, mutated client.Object }{
		"env added":      {pod(nil, nil), pod(host, nil)},
		"env replaced":   {pod(host, nil), pod([]corev1.EnvVar{{Name: "KUBERNETES_SERVICE_HOST", Value: "localhost"}}, nil)},
		"env removed":    {pod(host, nil), pod(nil, nil)},
		"args removed":   {pod(nil, []string{"--k8s-api-server=x"}), pod(nil, nil)},
		"args shortened": {pod(nil, []string{"--a", "--k8s-api-server=x"}), pod(nil, []string{"--a"})},
		"no change":      {pod(host, nil), pod(host, nil)},
		"one of several env replaced": {
			pod(append([]corev1.EnvVar{{Name: "A", Value: "1"}}, host...), nil),
			pod([]corev1.EnvVar{{Name: "A", Value: "1"}, {Name: "KUBERNETES_SERVICE_HOST", Value: "localhost"}}, nil),
		},
		"arg replaced in place":                  {pod(nil, []string{"--a", "--b=1"}), pod(nil, []string{"--a", "--b=2"})},
		"data keys":                              {cm(map[string]string{"k8s-api-server": "x", "a/b~c": "1", "keep": "1"}), cm(map[string]string{"keep": "1", "a/b~c": "2", "new": "3"})},
		"data from nil":                          {cm(nil), cm(map[string]string{"enable-l2-announcements": "true"})},
		"data to empty":                          {cm(map[string]string{"k8s-api-server": "x"}), cm(map[string]string{})},
		"host aliases, volumes and mounts added": {pod(nil, nil), withVolumes(pod(nil, nil), 1)},
		"host aliases, volumes and mounts grown": {withVolumes(pod(nil, nil), 1), withVolumes(pod(nil, nil), 2)},
	} {
		originalRaw, _ := json.Marshal(tc.original)
		mutatedRaw, _ := json.Marshal(tc.mutated)
		generic, err := gomodulesjsonpatch.CreatePatch(originalRaw, mutatedRaw)
		if err != nil {
			t.Fatal(err)
		}
		want := apply(t, tc.original, generic)
		got := apply(t, tc.original, patchOf(t, tc.original, tc.mutated))
		if !jsonpatch.Equal(got, want) {
			t.Errorf("%s:\n got %s\nwant %s", name, got, want)
		}
		if name == "no change" && len(patchOf(t, tc.original, tc.mutated)) != 0 {
			t.Errorf("no change gave a patch")
		}
	}
}

// withVolumes adds n host aliases, volumes and volume mounts to pod.
func withVolumes(pod *corev1.Pod, n int) *corev1.Pod {
	for i := range n {
		name := "v" + strconv.Itoa(i)
		pod.Spec.HostAliases = append(pod.Spec.HostAliases, corev1.HostAlias{IP: "10.0.0." + strconv.Itoa(i), Hostnames: []string{name}})
		pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
		pod.Spec.InitContainers[0].VolumeMounts = append(pod.Spec.InitContainers[0].VolumeMounts, corev1.VolumeMount{Name: name, MountPath: "/" + name})
	}
	return pod
}

// TestInternalErrorAllows: whatever fails inside, the answer is allowed without a patch (a denial would be enforced
// whatever the failurePolicy), and the error is counted.
func TestInternalErrorAllows(t *testing.T) {
	broken := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(fixtures.Cluster(fixtures.Shoot(true))).
		WithInterceptorFuncs(interceptor.Funcs{List: func(context.Context, client.WithWatch, client.ObjectList, ...client.ListOption) error {
			return errors.New("cache not started")
		}}).Build()
	h := &handler{name: "cilium-agent", mutator: NewMutator(broken)}
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

	panicking := &handler{name: "cilium-agent", mutator: panicMutator{}}
	if resp := panicking.Handle(context.Background(), request("Pod", raw, nil)); !resp.Allowed || len(resp.Patches) != 0 {
		t.Errorf("a panic answered %+v, want allowed without a patch", resp.Result)
	}
}

type panicMutator struct{}

func (panicMutator) Mutate(context.Context, client.Object, client.Object) error { panic("bug") }

// TestPatchReplacesOnlyChangedItems: kube-apiserver copies what a patch does not reach without parsing it, so a list of
// the same length is patched item by item.
func TestPatchReplacesOnlyChangedItems(t *testing.T) {
	env := func(host string) []corev1.EnvVar {
		return []corev1.EnvVar{{Name: "A", Value: "1"}, {Name: "KUBERNETES_SERVICE_HOST", Value: host}, {Name: "B", Value: "2"}}
	}
	original := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "cilium-agent", Env: env("api")}}}}
	mutated := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "cilium-agent", Env: env("localhost")}}}}
	ops := patchOf(t, original, mutated)
	if len(ops) != 1 || ops[0].Operation != "replace" || ops[0].Path != "/spec/containers/0/env/1" {
		t.Errorf("patch %v, want one replace of /spec/containers/0/env/1", ops)
	}
}

// TestPatchRefusesUndocumentedChanges: a mutation that changes anything its kind does not let it change gets no patch
// but an error, which the handler answers allowed without changes and counts: the patch would not carry the change.
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
		mutated := pod()
		change(mutated)
		if ops, err := kindOf(mutated).patchOf(pod(), mutated); err == nil {
			t.Errorf("%s: a change outside the kind's fields gave the patch %v, want an error", name, ops)
		}

		h := &handler{name: "cilium-agent", mutator: changeMutator(change)}
		raw, _ := json.Marshal(pod())
		before := testutil.ToFloat64(admissionErrors.WithLabelValues("cilium-agent"))
		if resp := h.Handle(context.Background(), request("Pod", raw, nil)); !resp.Allowed || len(resp.Patches) != 0 {
			t.Errorf("%s: answered %+v with %d operations, want allowed without a patch", name, resp.Result, len(resp.Patches))
		}
		if after := testutil.ToFloat64(admissionErrors.WithLabelValues("cilium-agent")); after != before+1 {
			t.Errorf("%s: error count went from %v to %v", name, before, after)
		}
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cilium-config"}, Data: map[string]string{"a": "1"}}
	renamed := cm.DeepCopy()
	renamed.Annotations = map[string]string{"x": "y"}
	if _, err := kindOf(cm).patchOf(cm, renamed); err == nil {
		t.Error("an annotation added to cilium-config gave a patch, want an error")
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
