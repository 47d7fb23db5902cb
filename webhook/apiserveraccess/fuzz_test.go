package apiserveraccess

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	admissionv1 "k8s.io/api/admission/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/apiserverendpoints"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/cilium"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/exposure/ciliumconfig"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/scheme"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/fixtures"
)

var fuzzKinds = []string{"Pod", "DaemonSet", "Deployment", "ConfigMap"}

// documentedEnv and documentedKeys are all the mutation may change besides `--k8s-api-server*` flags.
var (
	documentedEnv  = []string{cilium.EnvServiceHost, cilium.EnvServicePort, cilium.EnvAPIServerURLs, cilium.EnvAPIServer, cilium.EnvKubeconfigPath}
	documentedKeys = []string{
		cilium.FlagAPIServer, cilium.FlagAPIServerURLs, cilium.FlagKubeconfigPath, ciliumconfig.KeyLBIPAM, ciliumconfig.KeyL2Announcements,
		ciliumconfig.KeyL2LeaseDuration, ciliumconfig.KeyL2LeaseRenewDeadline, ciliumconfig.KeyL2LeaseRetryPeriod,
		ciliumconfig.KeyBGPControlPlane, ciliumconfig.KeyClientQPS, ciliumconfig.KeyClientBurst,
	}
)

// addSeeds adds Cilium's real rendered objects (testdata/seeds) with the index of their kind.
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
		kind := slices.IndexFunc(fuzzKinds, func(k string) bool { return strings.HasPrefix(filepath.Base(seed), strings.ToLower(k)+"-") })
		f.Add(uint8(kind), data)
	}
}

// FuzzAdmission feeds the handler arbitrary objects of every kind it serves, seeded with Cilium's real rendered
// objects (testdata/seeds), and checks that it never panics, that its patch applies, that a second admission of the
// result yields no patch, and that nothing outside the documented env, args and keys changes.
func FuzzAdmission(f *testing.F) {
	addSeeds(f)

	objs := []client.Object{fixtures.Cluster(fixtures.WithExposureConfig(fixtures.Shoot(true), fixtures.ExposureConfigL2))}
	for _, n := range fixtures.Nodes() {
		objs = append(objs, n)
	}
	h := &handler{mutator: NewMutator(fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(objs...).Build())}

	f.Fuzz(func(t *testing.T, kindIndex uint8, data []byte) {
		kind := fuzzKinds[int(kindIndex)%len(fuzzKinds)]
		obj, err := decode(kind, data)
		if err != nil {
			return
		}
		// Make it an object the webhooks select, so that the mutation runs.
		obj.SetNamespace(cilium.Namespace)
		obj.SetDeletionTimestamp(nil)
		if kind == "ConfigMap" {
			obj.SetName(cilium.ConfigMapName)
		} else if !IsCiliumWorkload(obj.GetLabels()) {
			obj.SetLabels(map[string]string{cilium.LabelKeyApp: cilium.LabelValueAgent})
		}
		raw, err := json.Marshal(obj)
		if err != nil {
			return
		}

		mutatedRaw := admit(t, h, kind, raw)
		if again := admitOps(t, h, kind, mutatedRaw); again != 0 {
			t.Fatalf("the second admission patched again (%d operations)", again)
		}
		original, _ := decode(kind, raw)
		mutated, err := decode(kind, mutatedRaw)
		if err != nil {
			t.Fatalf("the patched object does not decode: %v", err)
		}
		checkOnlyDocumentedChanges(t, original, mutated)
	})
}

// FuzzDecoders: the handler's decoder (json-iterator) reads every object as encoding/json does. Only valid UTF-8 is
// compared: kube-apiserver encodes with encoding/json, which never sends anything else, and the two libraries repair
// invalid bytes differently.
func FuzzDecoders(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, kindIndex uint8, data []byte) {
		kind := fuzzKinds[int(kindIndex)%len(fuzzKinds)]
		if !utf8.Valid(data) {
			return
		}
		want, err := decodeWith(json.Unmarshal, kind, data)
		if err != nil {
			return
		}
		got, err := decode(kind, data)
		if err != nil {
			t.Fatalf("encoding/json decodes it, the handler's decoder fails: %v", err)
		}
		if !equality.Semantic.DeepEqual(got, want) {
			t.Fatalf("the decoders disagree:\n got %+v\nwant %+v", got, want)
		}
	})
}

func request(kind string, raw []byte) admission.Request {
	return admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		UID: "fuzz", Kind: metav1.GroupVersionKind{Kind: kind}, Operation: admissionv1.Create,
		Namespace: cilium.Namespace, Object: runtime.RawExtension{Raw: raw},
	}}
}

func admitOps(t *testing.T, h *handler, kind string, raw []byte) int {
	t.Helper()
	resp := h.Handle(context.Background(), request(kind, raw))
	if !resp.Allowed {
		t.Fatalf("denied: %v", resp.Result)
	}
	return len(resp.Patches)
}

func admit(t *testing.T, h *handler, kind string, raw []byte) []byte {
	t.Helper()
	resp := h.Handle(context.Background(), request(kind, raw))
	if !resp.Allowed {
		t.Fatalf("denied: %v", resp.Result)
	}
	return applyOps(t, raw, resp.Patches)
}

func checkOnlyDocumentedChanges(t *testing.T, original, mutated client.Object) {
	t.Helper()
	if o, ok := original.(*corev1.ConfigMap); ok {
		m := mutated.(*corev1.ConfigMap)
		for k, v := range o.Data {
			if !slices.Contains(documentedKeys, k) && m.Data[k] != v {
				t.Fatalf("key %s changed", k)
			}
		}
		for k := range m.Data {
			if _, ok := o.Data[k]; !ok && !slices.Contains(documentedKeys, k) {
				t.Fatalf("key %s appeared", k)
			}
		}
		return
	}
	originalSpec, mutatedSpec := podSpecOf(original), podSpecOf(mutated)
	oc, mc := slices.Concat(originalSpec.InitContainers, originalSpec.Containers), slices.Concat(mutatedSpec.InitContainers, mutatedSpec.Containers)
	if len(oc) != len(mc) {
		t.Fatal("containers were added or removed")
	}
	for i := range oc {
		if !equality.Semantic.DeepEqual(withoutDocumentedEnv(oc[i].Env), withoutDocumentedEnv(mc[i].Env)) {
			t.Fatalf("container %s: undocumented env changed", oc[i].Name)
		}
		if !slices.Equal(removeAPIServerFlags(slices.Clone(oc[i].Args)), mc[i].Args) && !slices.Equal(oc[i].Args, mc[i].Args) {
			t.Fatalf("container %s: args %v became %v", oc[i].Name, oc[i].Args, mc[i].Args)
		}
		if !slices.Equal(removeAPIServerFlags(slices.Clone(oc[i].Command)), mc[i].Command) && !slices.Equal(oc[i].Command, mc[i].Command) {
			t.Fatalf("container %s: command %v became %v", oc[i].Name, oc[i].Command, mc[i].Command)
		}
		rest, restMutated := oc[i].DeepCopy(), mc[i].DeepCopy()
		rest.Env, rest.Args, rest.Command, restMutated.Env, restMutated.Args, restMutated.Command = nil, nil, nil, nil, nil, nil
		rest.VolumeMounts = withoutEndpointsMount(rest.VolumeMounts)
		restMutated.VolumeMounts = withoutEndpointsMount(restMutated.VolumeMounts)
		if !equality.Semantic.DeepEqual(rest, restMutated) {
			t.Fatalf("container %s: fields other than env, args, command and the endpoints mount changed", oc[i].Name)
		}
	}
}

func withoutEndpointsMount(mounts []corev1.VolumeMount) []corev1.VolumeMount {
	return without(mounts, func(m corev1.VolumeMount) bool { return m.Name == apiserverendpoints.VolumeName })
}

func withoutDocumentedEnv(env []corev1.EnvVar) []corev1.EnvVar {
	return without(env, func(e corev1.EnvVar) bool { return slices.Contains(documentedEnv, e.Name) })
}

// without is a copy of items without those that drop picks, nil when none is left.
func without[T any](items []T, drop func(T) bool) []T {
	out := slices.DeleteFunc(slices.Clone(items), drop)
	if len(out) == 0 {
		return nil
	}
	return out
}

func podSpecOf(obj client.Object) *corev1.PodSpec {
	switch o := obj.(type) {
	case *corev1.Pod:
		return &o.Spec
	case *appsv1.DaemonSet:
		return &o.Spec.Template.Spec
	case *appsv1.Deployment:
		return &o.Spec.Template.Spec
	}
	panic("no pod spec")
}
