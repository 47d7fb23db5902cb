// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package apiserveraccess

import (
	"net/netip"
	"slices"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/apiserverendpoints"
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

	pinPodSpec(spec, target{Pod: true, ControlPlane: true, Version: version(t, "1.19.7")})

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
	if want := []string{"KUBERNETES_SERVICE_HOST", "GOMEMLIMIT", "KUBERNETES_SERVICE_PORT", "CILIUM_K8S_API_SERVER_URLS", "CILIUM_K8S_CLIENT_CONNECTION_TIMEOUT", "HTTP2_PING_TIMEOUT_SECONDS", "HTTP2_READ_IDLE_TIMEOUT_SECONDS"}; !slices.Equal(names(spec.Containers[0]), want) {
		t.Errorf("agent env = %v, want %v", names(spec.Containers[0]), want)
	}
	if !equality.Semantic.DeepEqual(spec.InitContainers[1], *unrelated) {
		t.Errorf("mount-cgroup changed: %+v", spec.InitContainers[1])
	}

	again := spec.DeepCopy()
	pinPodSpec(again, target{Pod: true, ControlPlane: true, Version: version(t, "1.19.7")})
	if !equality.Semantic.DeepEqual(spec, again) {
		t.Errorf("second pass changed the spec")
	}
}

func controlPlane(t *testing.T, ips ...string) apiserverendpoints.ControlPlane {
	t.Helper()
	var nodes []corev1.Node
	for i, ip := range ips {
		nodes = append(nodes, corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: "cp-" + strconv.Itoa(i), Labels: map[string]string{"node-role.kubernetes.io/control-plane": ""}},
			Status:     corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}},
		})
	}
	return apiserverendpoints.FromNodes(nodes)
}

func TestPinPodSpecOffControlPlane(t *testing.T) {
	spec := &corev1.PodSpec{
		HostAliases: []corev1.HostAlias{{IP: "10.1.1.1", Hostnames: []string{"registry.local"}}},
		Containers: []corev1.Container{{
			Name: "cilium-agent",
			Env: []corev1.EnvVar{env("KUBERNETES_SERVICE_HOST", "api.example.com"), env("CILIUM_K8S_API_SERVER_URLS", "https://vip:443"),
				env("CILIUM_K8S_KUBECONFIG_PATH", "/var/lib/cilium-selfhosted-apiserver/kubeconfig")},
		}},
	}
	tgt := target{Pod: true, Endpoints: controlPlane(t, "10.0.0.3", "10.0.0.1", "10.0.0.2"), SpreadKey: "worker-1", Version: version(t, "1.20.2")}
	pinPodSpec(spec, tgt)

	c := spec.Containers[0]
	for name, want := range map[string]string{
		"KUBERNETES_SERVICE_HOST":    "kube-apiserver.kube-system.svc.cluster.local",
		"KUBERNETES_SERVICE_PORT":    "443",
		"CILIUM_K8S_API_SERVER_URLS": "https://kube-apiserver.kube-system.svc.cluster.local:443",
	} {
		if e, ok := envNamed(c, name); !ok || e.Value != want || e.ValueFrom != nil {
			t.Errorf("%s = %+v, want %q", name, e, want)
		}
	}
	if _, ok := envNamed(c, "CILIUM_K8S_KUBECONFIG_PATH"); ok {
		t.Error("the template's kubeconfig path is left, and it would beat the one URL")
	}
	if len(spec.HostAliases) != 4 || spec.HostAliases[0].IP != "10.1.1.1" {
		t.Fatalf("hostAliases = %+v, want the pod's own and one per control-plane address", spec.HostAliases)
	}
	var ips []string
	for _, a := range spec.HostAliases[1:] {
		if !slices.Equal(a.Hostnames, []string{"kube-apiserver.kube-system.svc.cluster.local"}) {
			t.Errorf("alias %+v names more or less than the server name", a)
		}
		ips = append(ips, a.IP)
	}
	if sorted := slices.Sorted(slices.Values(ips)); !slices.Equal(sorted, []string{"10.0.0.1", "10.0.0.2", "10.0.0.3"}) {
		t.Errorf("aliases resolve to %v, want every control-plane address", ips)
	}

	again := spec.DeepCopy()
	pinPodSpec(again, tgt)
	if !equality.Semantic.DeepEqual(spec, again) {
		t.Errorf("second pass changed the spec: %+v", again.HostAliases)
	}
}

func TestHostAliasesSpreadNodes(t *testing.T) {
	cp := controlPlane(t, "10.0.0.1", "10.0.0.2", "10.0.0.3")
	first := map[string]int{}
	for i := range 60 {
		first[cp.HostAliases("worker-" + strconv.Itoa(i))[0].IP]++
	}
	for _, ip := range []string{"10.0.0.1", "10.0.0.2", "10.0.0.3"} {
		if first[ip] < 10 {
			t.Errorf("%d of 60 nodes dial %s first, want a spread over the control plane: %v", first[ip], ip, first)
		}
	}
	if a, b := cp.HostAliases("worker-7"), cp.HostAliases("worker-7"); !equality.Semantic.DeepEqual(a, b) {
		t.Error("the same node got two orders")
	}
}

func TestPinPodSpecTemplate(t *testing.T) {
	newSpec := func() *corev1.PodSpec {
		return &corev1.PodSpec{
			InitContainers: []corev1.Container{{Name: "config", Args: []string{"--k8s-api-server-urls=https://vip:443"}}},
			Containers: []corev1.Container{
				{Name: "cilium-agent", Env: []corev1.EnvVar{env("CILIUM_K8S_API_SERVER_URLS", "https://vip:443")}},
				{Name: "cilium-operator", Env: []corev1.EnvVar{env("KUBERNETES_SERVICE_HOST", "api.example.com")}},
			},
			Volumes: []corev1.Volume{{Name: "tmp"}},
		}
	}
	for _, v := range []string{"1.17.8", "1.20.2"} {
		spec := newSpec()
		pinPodSpec(spec, target{Version: version(t, v)})

		if len(spec.Volumes) != 2 || spec.Volumes[1].ConfigMap == nil || spec.Volumes[1].ConfigMap.Name != "cilium-selfhosted-apiserver-endpoints" ||
			spec.Volumes[1].ConfigMap.Optional == nil || !*spec.Volumes[1].ConfigMap.Optional {
			t.Fatalf("%s: volumes = %+v, want the endpoints ConfigMap, optional", v, spec.Volumes)
		}
		for _, c := range slices.Concat(spec.InitContainers, spec.Containers) {
			ref := func(name string) *corev1.ConfigMapKeySelector {
				e, ok := envNamed(c, name)
				if !ok || e.ValueFrom == nil {
					return nil
				}
				return e.ValueFrom.ConfigMapKeyRef
			}
			if r := ref("CILIUM_K8S_KUBECONFIG_PATH"); r == nil || r.Key != "CILIUM_K8S_KUBECONFIG_PATH" || !*r.Optional {
				t.Errorf("%s %s: kubeconfig path from %+v", v, c.Name, r)
			}
			wantURLs := v != "1.17.8" && c.Name != "cilium-agent"
			if r := ref("CILIUM_K8S_API_SERVER_URLS"); (r != nil) != wantURLs {
				t.Errorf("%s %s: URL list from %+v, want one: %v", v, c.Name, r, wantURLs)
			}
			if _, ok := envNamed(c, "CILIUM_K8S_API_SERVER_URLS"); ok && !wantURLs {
				t.Errorf("%s %s: a URL list is left", v, c.Name)
			}
			if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
				return m.Name == "cilium-selfhosted-apiserver" && m.MountPath == "/var/lib/cilium-selfhosted-apiserver" && m.ReadOnly
			}) {
				t.Errorf("%s %s: volume mounts %+v", v, c.Name, c.VolumeMounts)
			}
			if e, _ := envNamed(c, "KUBERNETES_SERVICE_HOST"); c.Name == "cilium-operator" && e.Value != "api.example.com" {
				t.Errorf("%s: the chart's KUBERNETES_SERVICE_HOST changed to %+v", v, e)
			}
		}
		if len(spec.InitContainers[0].Args) != 0 {
			t.Errorf("%s: config args %v", v, spec.InitContainers[0].Args)
		}
		again := spec.DeepCopy()
		pinPodSpec(again, target{Version: version(t, v)})
		if !equality.Semantic.DeepEqual(spec, again) {
			t.Errorf("%s: second pass changed the spec", v)
		}
	}
}

func TestPinPodSpecOffControlPlaneWithoutEndpoints(t *testing.T) {
	spec := &corev1.PodSpec{Containers: []corev1.Container{{Name: "cilium-operator"}}}
	template := spec.DeepCopy()
	pinPodSpec(spec, target{Pod: true, Version: version(t, "1.19.7")})
	pinPodSpec(template, target{Version: version(t, "1.19.7")})
	if !equality.Semantic.DeepEqual(spec, template) || len(spec.HostAliases) != 0 {
		t.Errorf("a pod off the control plane with no control-plane node known must get what its template gets: %+v", spec)
	}
}

func TestPinPodSpecCilium117(t *testing.T) {
	spec := &corev1.PodSpec{Containers: []corev1.Container{{
		Name: "cilium-agent",
		Env:  []corev1.EnvVar{env("KUBERNETES_SERVICE_HOST", "api.example.com"), env("CILIUM_K8S_API_SERVER_URLS", "https://vip:443")},
	}}}
	worker := spec.DeepCopy()
	pinPodSpec(spec, target{Pod: true, ControlPlane: true, Version: version(t, "1.17.8")})
	if _, ok := envNamed(spec.Containers[0], "CILIUM_K8S_API_SERVER_URLS"); ok {
		t.Error("1.17 has no URL list, but CILIUM_K8S_API_SERVER_URLS is set")
	}
	if e, _ := envNamed(spec.Containers[0], "KUBERNETES_SERVICE_HOST"); e.Value != "localhost" {
		t.Errorf("KUBERNETES_SERVICE_HOST = %+v", e)
	}
	pinPodSpec(worker, target{Pod: true, Endpoints: controlPlane(t, "10.0.0.1"), Version: version(t, "1.17.8")})
	if e, _ := envNamed(worker.Containers[0], "KUBERNETES_SERVICE_HOST"); e.Value != "kube-apiserver.kube-system.svc.cluster.local" || len(worker.HostAliases) != 1 {
		t.Errorf("1.17 off the control plane: KUBERNETES_SERVICE_HOST = %+v, hostAliases %+v", e, worker.HostAliases)
	}
}

func TestPinPodSpecLeavesOtherContainers(t *testing.T) {
	spec := &corev1.PodSpec{Containers: []corev1.Container{
		{Name: "cilium-monitor", Args: []string{"--k8s-api-server=x"}},
		{Name: "custom-sidecar", Env: []corev1.EnvVar{env("KUBERNETES_SERVICE_HOST", "api.example.com")}},
	}}
	pinPodSpec(spec, target{Pod: true, ControlPlane: true})
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
		{[]string{"--k8s-kubeconfig-path", "/etc/k", "--a"}, []string{"--a"}},
		{[]string{"k8s-api-server=x"}, []string{"k8s-api-server=x"}},
	} {
		if got := removeAPIServerFlags(slices.Clone(tc.in)); !slices.Equal(got, tc.want) {
			t.Errorf("removeAPIServerFlags(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestCleanConfig(t *testing.T) {
	data := map[string]string{"k8s-api-server": "https://vip", "k8s-api-server-urls": "https://vip:443", "k8s-kubeconfig-path": "/etc/kubeconfig",
		"enable-l2-announcements": "true"}
	cleanConfig(data)
	if len(data) != 1 || data["enable-l2-announcements"] != "true" {
		t.Errorf("data = %v", data)
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
		if got := nodeNameOf(&corev1.Pod{Spec: tc.spec}); got != tc.want {
			t.Errorf("%s: nodeNameOf = %q, want %q", name, got, tc.want)
		}
	}
}

// TestDeadPeerTimeouts: every container that talks to kube-apiserver, wherever it runs and from a pod or a template,
// gets client-go's HTTP/2 health check tightened, unless the chart or the operator set it; other containers do not.
func TestDeadPeerTimeouts(t *testing.T) {
	cp := apiserverendpoints.ControlPlane{Addresses: []netip.Addr{netip.MustParseAddr("10.0.1.10")}}
	for name, tgt := range map[string]target{
		"pod on the control plane": {Pod: true, ControlPlane: true, Version: version(t, "1.19.7")},
		"pod on a worker":          {Pod: true, Endpoints: cp, SpreadKey: "worker-0", Version: version(t, "1.19.7")},
		"template":                 {Version: version(t, "1.17.8")},
	} {
		spec := &corev1.PodSpec{Containers: []corev1.Container{
			{Name: "cilium-agent", Command: []string{"cilium-agent"}, Env: []corev1.EnvVar{{Name: "HTTP2_PING_TIMEOUT_SECONDS", Value: "2"}}},
			{Name: "sidecar", Command: []string{"sleep"}},
		}}
		pinPodSpec(spec, tgt)
		if e, _ := envNamed(spec.Containers[0], "HTTP2_READ_IDLE_TIMEOUT_SECONDS"); e.Value != "4" {
			t.Errorf("%s: HTTP2_READ_IDLE_TIMEOUT_SECONDS = %+v, want 4", name, e)
		}
		if e, _ := envNamed(spec.Containers[0], "CILIUM_K8S_CLIENT_CONNECTION_TIMEOUT"); e.Value != "6s" {
			t.Errorf("%s: CILIUM_K8S_CLIENT_CONNECTION_TIMEOUT = %+v, want 6s", name, e)
		}
		if e, _ := envNamed(spec.Containers[0], "HTTP2_PING_TIMEOUT_SECONDS"); e.Value != "2" {
			t.Errorf("%s: the chart's HTTP2_PING_TIMEOUT_SECONDS became %+v", name, e)
		}
		if len(spec.Containers[1].Env) != 0 {
			t.Errorf("%s: a container that does not talk to kube-apiserver got %v", name, spec.Containers[1].Env)
		}
	}
}
