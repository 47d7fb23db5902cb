package apiserveraccess

import (
	"encoding/json"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	gomodulesjsonpatch "gomodules.xyz/jsonpatch/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
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
		"arg replaced in place": {pod(nil, []string{"--a", "--b=1"}), pod(nil, []string{"--a", "--b=2"})},
		"data keys":             {cm(map[string]string{"k8s-api-server": "x", "a/b~c": "1", "keep": "1"}), cm(map[string]string{"keep": "1", "a/b~c": "2", "new": "3"})},
		"data from nil":         {cm(nil), cm(map[string]string{"enable-l2-announcements": "true"})},
		"data to empty":         {cm(map[string]string{"k8s-api-server": "x"}), cm(map[string]string{})},
	} {
		want := apply(t, tc.original, nil)
		originalRaw, _ := json.Marshal(tc.original)
		mutatedRaw, _ := json.Marshal(tc.mutated)
		generic, err := gomodulesjsonpatch.CreatePatch(originalRaw, mutatedRaw)
		if err != nil {
			t.Fatal(err)
		}
		want = apply(t, tc.original, generic)
		got := apply(t, tc.original, patch(tc.original, tc.mutated))
		if !jsonpatch.Equal(got, want) {
			t.Errorf("%s:\n got %s\nwant %s", name, got, want)
		}
		if name == "no change" && len(patch(tc.original, tc.mutated)) != 0 {
			t.Errorf("no change gave a patch")
		}
	}
}

// TestPatchReplacesOnlyChangedItems: kube-apiserver copies what a patch does not reach without parsing it, so a list of
// the same length is patched item by item.
func TestPatchReplacesOnlyChangedItems(t *testing.T) {
	env := func(host string) []corev1.EnvVar {
		return []corev1.EnvVar{{Name: "A", Value: "1"}, {Name: "KUBERNETES_SERVICE_HOST", Value: host}, {Name: "B", Value: "2"}}
	}
	original := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "cilium-agent", Env: env("api")}}}}
	mutated := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "cilium-agent", Env: env("localhost")}}}}
	ops := patch(original, mutated)
	if len(ops) != 1 || ops[0].Operation != "replace" || ops[0].Path != "/spec/containers/0/env/1" {
		t.Errorf("patch %v, want one replace of /spec/containers/0/env/1", ops)
	}
}
