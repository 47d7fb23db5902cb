// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package apiserveraccess

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/diff"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/apiserverendpoints"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/cilium"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/exposure/ciliumconfig"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/scheme"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/fixtures"
)

// documentedEnv and documentedKeys are all the mutation may change besides `--k8s-api-server*` flags, the endpoints
// volume and its mounts, and the host aliases of apiserverendpoints.ServerName.
var (
	documentedEnv = append([]string{cilium.EnvServiceHost, cilium.EnvServicePort, cilium.EnvAPIServerURLs, cilium.EnvAPIServer,
		cilium.EnvKubeconfigPath}, cilium.ClientTimeoutVars...)
	documentedKeys = []string{
		cilium.FlagAPIServer, cilium.FlagAPIServerURLs, cilium.FlagKubeconfigPath, ciliumconfig.KeyLBIPAM, ciliumconfig.KeyL2Announcements,
		ciliumconfig.KeyL2LeaseDuration, ciliumconfig.KeyL2LeaseRenewDeadline, ciliumconfig.KeyL2LeaseRetryPeriod,
		ciliumconfig.KeyBGPControlPlane, ciliumconfig.KeyClientQPS, ciliumconfig.KeyClientBurst,
	}
)

// addSeeds adds Cilium's real rendered objects (testdata/seeds) with the index of their kind, as CREATE and as UPDATE.
func addSeeds(f *testing.F) {
	seeds, err := filepath.Glob("testdata/seeds/*.json")
	if err != nil || len(seeds) == 0 {
		f.Fatalf("no seeds: %v", err)
	}
	for _, seed := range seeds {
		data, err := os.ReadFile(seed)
		if err != nil {
			f.Fatal(err)
		}
		k := slices.IndexFunc(kinds, func(k kind) bool { return strings.HasPrefix(filepath.Base(seed), strings.ToLower(k.name)+"-") })
		if k < 0 {
			f.Fatalf("seed %s is of no kind the webhook admits", seed)
		}
		f.Add(uint8(k), false, data)
		f.Add(uint8(k), true, data)
	}
}

// FuzzAdmission feeds the handler arbitrary whole objects of every kind it admits, on CREATE and on UPDATE, seeded with
// Cilium's real rendered objects (testdata/seeds). It applies each patch to the whole object, as kube-apiserver does,
// and checks that the handler never fails or panics, that the patched object decodes, that a second admission yields
// no patch, and that nothing outside the documented env, args, keys, volume, mounts and host aliases changed: probes,
// security contexts, resources and everything else come through as they were.
func FuzzAdmission(f *testing.F) {
	addSeeds(f)

	objs := []client.Object{fixtures.Cluster(fixtures.WithExposureConfig(fixtures.Shoot(true), fixtures.ExposureConfigL2))}
	for _, n := range fixtures.Nodes() {
		objs = append(objs, n)
	}
	h := newTestHandler(f, "fuzz", NewMutator(fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(objs...).Build()))

	f.Fuzz(func(t *testing.T, kindIndex uint8, update bool, data []byte) {
		k := &kinds[int(kindIndex)%len(kinds)]
		original := k.object.DeepCopyObject().(client.Object)
		if err := json.Unmarshal(data, original); err != nil {
			return
		}
		// Make it an object the webhooks select, so that the mutation runs.
		original.SetNamespace(cilium.Namespace)
		original.SetDeletionTimestamp(nil)
		if k.data != nil {
			original.SetName(cilium.ConfigMapName)
		} else if !cilium.IsWorkload(original.GetLabels()) {
			original.SetLabels(map[string]string{cilium.LabelKeyApp: cilium.LabelValueAgent})
		}
		raw, err := json.Marshal(original)
		if err != nil {
			return
		}
		var old []byte
		if update {
			old = raw
		}

		mutatedRaw := admit(t, h, k.name, raw, old)
		if again := admitOps(t, h, k.name, mutatedRaw, old); again != 0 {
			t.Fatalf("the second admission patched again (%d operations)", again)
		}
		mutated := k.object.DeepCopyObject().(client.Object)
		if err := json.Unmarshal(mutatedRaw, mutated); err != nil {
			t.Fatalf("the patched object does not decode: %v", err)
		}
		if _, isPod := original.(*corev1.Pod); isPod && update && !equality.Semantic.DeepEqual(original, mutated) {
			t.Fatal("an UPDATE of a pod, whose environment is immutable, was changed")
		}
		checkOnlyDocumentedChanges(t, k, original, mutated)
	})
}

// request is the admission request kube-apiserver sends for raw (old on UPDATE), with the kind's group and version.
func request(kind string, raw, old []byte) admission.Request {
	op := admissionv1.Create
	if old != nil {
		op = admissionv1.Update
	}
	gvk := metav1.GroupVersionKind{Kind: kind}
	if k := kindNamed(kind); k != nil {
		if g, err := apiutil.GVKForObject(k.object, scheme.New()); err == nil {
			gvk = metav1.GroupVersionKind(g)
		}
	}
	return admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		UID: "fuzz", Kind: gvk, Operation: op,
		Namespace: cilium.Namespace, Object: runtime.RawExtension{Raw: raw}, OldObject: runtime.RawExtension{Raw: old},
	}}
}

// handle admits raw and fails on anything but an allowed answer without an internal error.
func handle(t *testing.T, h *handler, kind string, raw, old []byte) admission.Response {
	t.Helper()
	resp := h.Handle(context.Background(), request(kind, raw, old))
	if !resp.Allowed {
		t.Fatalf("denied: %v", resp.Result)
	}
	if resp.Result != nil && strings.Contains(resp.Result.Message, "internal error") {
		t.Fatalf("internal error: %s", resp.Result.Message)
	}
	return resp
}

func admitOps(t *testing.T, h *handler, kind string, raw, old []byte) int {
	t.Helper()
	return len(handle(t, h, kind, raw, old).Patches)
}

func admit(t *testing.T, h *handler, kind string, raw, old []byte) []byte {
	t.Helper()
	return applyOps(t, raw, handle(t, h, kind, raw, old).Patches)
}

// checkOnlyDocumentedChanges compares the whole objects once the documented changes are taken out of both.
func checkOnlyDocumentedChanges(t *testing.T, k *kind, original, mutated client.Object) {
	t.Helper()
	rest, mutatedRest := withoutDocumented(k, original), withoutDocumented(k, mutated)
	if !equality.Semantic.DeepEqual(rest, mutatedRest) {
		t.Fatalf("undocumented changes: %s", diff.Diff(rest, mutatedRest))
	}
}

// withoutDocumented is a copy of obj without what the webhook documents it may change.
func withoutDocumented(k *kind, obj client.Object) client.Object {
	rest := obj.DeepCopyObject().(client.Object)
	if k.data != nil {
		data := k.data(rest)
		for _, key := range documentedKeys {
			delete(*data, key)
		}
		return rest
	}
	spec := k.podSpec(rest)
	spec.HostAliases = without(spec.HostAliases, func(a corev1.HostAlias) bool { return slices.Contains(a.Hostnames, apiserverendpoints.ServerName) })
	spec.Volumes = without(spec.Volumes, func(v corev1.Volume) bool { return v.Name == apiserverendpoints.VolumeName })
	for _, containers := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for i := range containers {
			c := &containers[i]
			c.Env = without(c.Env, func(e corev1.EnvVar) bool { return slices.Contains(documentedEnv, e.Name) })
			c.VolumeMounts = without(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == apiserverendpoints.VolumeName })
			c.Args = removeAPIServerFlags(slices.Clone(c.Args))
			c.Command = removeAPIServerFlags(slices.Clone(c.Command))
		}
	}
	return rest
}

// without is a copy of items without those that drop picks, nil when none is left.
func without[T any](items []T, drop func(T) bool) []T {
	out := slices.DeleteFunc(slices.Clone(items), drop)
	if len(out) == 0 {
		return nil
	}
	return out
}
