package apiserveraccess

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/cilium"
)

func version(t *testing.T, v string) cilium.Version {
	t.Helper()
	parsed, ok := cilium.VersionFromImage("cilium:v" + v)
	if !ok {
		t.Fatalf("bad version %s", v)
	}
	return parsed
}

func env(name, value string) corev1.EnvVar { return corev1.EnvVar{Name: name, Value: value} }

func envNamed(c corev1.Container, name string) (corev1.EnvVar, bool) {
	i := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == name })
	if i < 0 {
		return corev1.EnvVar{}, false
	}
	return c.Env[i], true
}

func TestPinPodSpecControlPlane(t *testing.T) {
	spec := &corev1.PodSpec{
		InitContainers: []corev1.Container{{
			Name:    "config",
			Command: []string{"cilium-dbg", "build-config"},
			Args:    []string{"--k8s-api-server-urls=https://api.example.com:443", "--source=config-map:cilium-config"},
			Env:     []corev1.EnvVar{env("K8S_NODE_NAME", "x"), env("KUBERNETES_SERVICE_HOST", "api.example.com"), env("KUBERNETES_SERVICE_PORT", "443")},
		}, {
			Name: "mount-cgroup", Env: []corev1.EnvVar{env("CGROUP_ROOT", "/run/cilium/cgroupv2")},
		}},
		Containers: []corev1.Container{{
			Name: "cilium-agent",
			Args: []string{"--config-dir=/tmp/cilium/config-map", "--k8s-api-server", "https://vip:443", "--debug"},
			Env: []corev1.EnvVar{
				env("KUBERNETES_SERVICE_HOST", "10.96.0.1"), env("CILIUM_K8S_API_SERVER", "https://vip"),
				env("GOMEMLIMIT", "1Gi"), env("KUBERNETES_SERVICE_HOST", "duplicate"),
			},
		}},
	}
	unrelated := spec.InitContainers[1].DeepCopy()

	PinPodSpec(spec, Target{ControlPlane: true, Version: version(t, "1.19.7")})

	for _, c := range []corev1.Container{spec.InitContainers[0], spec.Containers[0]} {
		for name, want := range map[string]string{
			"KUBERNETES_SERVICE_HOST":    "localhost",
			"KUBERNETES_SERVICE_PORT":    "443",
			"CILIUM_K8S_API_SERVER_URLS": "https://localhost:443",
		} {
			if e, ok := envNamed(c, name); !ok || e.Value != want || e.ValueFrom != nil {
				t.Errorf("%s: %s = %+v, want %q", c.Name, name, e, want)
			}
		}
		if _, ok := envNamed(c, "CILIUM_K8S_API_SERVER"); ok {
			t.Errorf("%s: CILIUM_K8S_API_SERVER left", c.Name)
		}
	}
	if got := spec.InitContainers[0].Env[0]; got.Name != "K8S_NODE_NAME" || spec.InitContainers[0].Env[1].Name != "KUBERNETES_SERVICE_HOST" {
		t.Errorf("env order changed: %v", spec.InitContainers[0].Env)
	}
	if want := []string{"--source=config-map:cilium-config"}; !slices.Equal(spec.InitContainers[0].Args, want) {
		t.Errorf("config args = %v, want %v", spec.InitContainers[0].Args, want)
	}
	if want := []string{"cilium-dbg", "build-config"}; !slices.Equal(spec.InitContainers[0].Command, want) {
		t.Errorf("config command = %v", spec.InitContainers[0].Command)
	}
	if want := []string{"--config-dir=/tmp/cilium/config-map", "--debug"}; !slices.Equal(spec.Containers[0].Args, want) {
		t.Errorf("agent args = %v, want %v", spec.Containers[0].Args, want)
	}
	names := func(c corev1.Container) []string {
		var n []string
		for _, e := range c.Env {
			n = append(n, e.Name)
		}
		return n
	}
	if want := []string{"KUBERNETES_SERVICE_HOST", "GOMEMLIMIT", "KUBERNETES_SERVICE_PORT", "CILIUM_K8S_API_SERVER_URLS"}; !slices.Equal(names(spec.Containers[0]), want) {
		t.Errorf("agent env = %v, want %v", names(spec.Containers[0]), want)
	}
	if !equality.Semantic.DeepEqual(spec.InitContainers[1], *unrelated) {
		t.Errorf("mount-cgroup changed: %+v", spec.InitContainers[1])
	}

	again := spec.DeepCopy()
	PinPodSpec(again, Target{ControlPlane: true, Version: version(t, "1.19.7")})
	if !equality.Semantic.DeepEqual(spec, again) {
		t.Errorf("second pass changed the spec")
	}
}

func TestPinPodSpecWorker(t *testing.T) {
	spec := &corev1.PodSpec{Containers: []corev1.Container{{
		Name: "cilium-operator",
		Env:  []corev1.EnvVar{env("KUBERNETES_SERVICE_HOST", "api.example.com"), env("CILIUM_K8S_API_SERVER_URLS", "https://vip:443")},
	}}}
	PinPodSpec(spec, Target{Version: version(t, "1.20.2")})

	c := spec.Containers[0]
	for name, key := range map[string]string{"KUBERNETES_SERVICE_HOST": "KUBERNETES_SERVICE_HOST", "CILIUM_K8S_API_SERVER_URLS": "CILIUM_K8S_API_SERVER_URLS"} {
		e, ok := envNamed(c, name)
		if !ok || e.Value != "" || e.ValueFrom == nil || e.ValueFrom.ConfigMapKeyRef == nil {
			t.Fatalf("%s = %+v, want a ConfigMap reference", name, e)
		}
		ref := e.ValueFrom.ConfigMapKeyRef
		if ref.Name != "cilium-selfhosted-apiserver-endpoints" || ref.Key != key || ref.Optional == nil || !*ref.Optional {
			t.Errorf("%s references %+v", name, ref)
		}
	}
	if e, _ := envNamed(c, "KUBERNETES_SERVICE_PORT"); e.Value != "443" {
		t.Errorf("KUBERNETES_SERVICE_PORT = %+v", e)
	}
}

func TestPinPodSpecCilium117(t *testing.T) {
	spec := &corev1.PodSpec{Containers: []corev1.Container{{
		Name: "cilium-agent",
		Env:  []corev1.EnvVar{env("KUBERNETES_SERVICE_HOST", "api.example.com"), env("CILIUM_K8S_API_SERVER_URLS", "https://vip:443")},
	}}}
	PinPodSpec(spec, Target{ControlPlane: true, Version: version(t, "1.17.8")})
	if _, ok := envNamed(spec.Containers[0], "CILIUM_K8S_API_SERVER_URLS"); ok {
		t.Error("1.17 has no URL list, but CILIUM_K8S_API_SERVER_URLS is set")
	}
	if e, _ := envNamed(spec.Containers[0], "KUBERNETES_SERVICE_HOST"); e.Value != "localhost" {
		t.Errorf("KUBERNETES_SERVICE_HOST = %+v", e)
	}
}

func TestPinPodSpecLeavesOtherContainers(t *testing.T) {
	spec := &corev1.PodSpec{Containers: []corev1.Container{
		{Name: "cilium-monitor", Args: []string{"--k8s-api-server=x"}},
		{Name: "custom-sidecar", Env: []corev1.EnvVar{env("KUBERNETES_SERVICE_HOST", "api.example.com")}},
	}}
	PinPodSpec(spec, Target{ControlPlane: true})
	if !slices.Equal(spec.Containers[0].Args, []string{"--k8s-api-server=x"}) || spec.Containers[0].Env != nil {
		t.Errorf("cilium-monitor changed: %+v", spec.Containers[0])
	}
	if e, _ := envNamed(spec.Containers[1], "KUBERNETES_SERVICE_HOST"); e.Value != "localhost" {
		t.Errorf("a container already pointed at an API server must be pinned too, got %+v", e)
	}
}

func TestRemoveAPIServerFlags(t *testing.T) {
	for _, tc := range []struct{ in, want []string }{
		{nil, nil},
		{[]string{"--a", "b"}, []string{"--a", "b"}},
		{[]string{"--k8s-api-server-urls=https://x:443", "--a"}, []string{"--a"}},
		{[]string{"--k8s-api-server-urls", "https://x:443", "--a"}, []string{"--a"}},
		{[]string{"--a", "--k8s-api-server"}, []string{"--a"}},
		{[]string{"--k8s-api-server", "--a"}, []string{"--a"}},
		{[]string{"--k8s-api-server-urlsx=1"}, []string{"--k8s-api-server-urlsx=1"}},
	} {
		if got := removeAPIServerFlags(slices.Clone(tc.in)); !slices.Equal(got, tc.want) {
			t.Errorf("removeAPIServerFlags(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestCleanConfig(t *testing.T) {
	data := map[string]string{"k8s-api-server": "https://vip", "k8s-api-server-urls": "https://vip:443", "enable-l2-announcements": "true"}
	if !CleanConfig(data) {
		t.Error("CleanConfig reported no change")
	}
	if len(data) != 1 || data["enable-l2-announcements"] != "true" {
		t.Errorf("data = %v", data)
	}
	if CleanConfig(data) {
		t.Error("second CleanConfig reported a change")
	}
}

func TestNodeNameOf(t *testing.T) {
	affinity := func(key string, op corev1.NodeSelectorOperator, values ...string) *corev1.Affinity {
		return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{{Key: key, Operator: op, Values: values}}}},
		}}}
	}
	for name, tc := range map[string]struct {
		spec corev1.PodSpec
		want string
	}{
		"nodeName":       {corev1.PodSpec{NodeName: "n1", Affinity: affinity("metadata.name", corev1.NodeSelectorOpIn, "n2")}, "n1"},
		"daemonset":      {corev1.PodSpec{Affinity: affinity("metadata.name", corev1.NodeSelectorOpIn, "n2")}, "n2"},
		"other field":    {corev1.PodSpec{Affinity: affinity("spec.x", corev1.NodeSelectorOpIn, "n2")}, ""},
		"several nodes":  {corev1.PodSpec{Affinity: affinity("metadata.name", corev1.NodeSelectorOpIn, "n2", "n3")}, ""},
		"not in":         {corev1.PodSpec{Affinity: affinity("metadata.name", corev1.NodeSelectorOpNotIn, "n2")}, ""},
		"unscheduled":    {corev1.PodSpec{}, ""},
		"preferred only": {corev1.PodSpec{Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{}}}, ""},
	} {
		if got := NodeNameOf(&corev1.Pod{Spec: tc.spec}); got != tc.want {
			t.Errorf("%s: NodeNameOf = %q, want %q", name, got, tc.want)
		}
	}
}
