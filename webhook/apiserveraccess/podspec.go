// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package apiserveraccess

import (
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	extensionswebhook "github.com/gardener/gardener/extensions/pkg/webhook"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/apiserverendpoints"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/cilium"
)

// target says what a pod spec is, where it runs and what its Cilium version understands.
type target struct {
	// Pod is true for a pod being created, false for the pod template of a DaemonSet or Deployment.
	Pod bool
	// ControlPlane is true for a pod on a control-plane node: it talks to the kube-apiserver of its own node.
	ControlPlane bool
	// Endpoints are the control-plane nodes known at admission; a pod off the control plane dials them.
	Endpoints apiserverendpoints.ControlPlane
	// SpreadKey picks the control-plane node that a pod off the control plane dials first (its node's name).
	SpreadKey string
	// Version is the Cilium version of the workload.
	Version cilium.Version
}

// pinPodSpec makes every container of spec that talks to kube-apiserver reach it without Cilium's help, verifying
// kube-apiserver's certificate as Gardener issues it (see package apiserverendpoints):
//
//   - a pod on a control-plane node: KUBERNETES_SERVICE_HOST=localhost, KUBERNETES_SERVICE_PORT=443 and, for
//     Cilium >= 1.18, CILIUM_K8S_API_SERVER_URLS=https://localhost:443;
//   - any other pod: hostAliases that resolve apiserverendpoints.ServerName to every control-plane InternalIP (starting
//     at a different one per node), KUBERNETES_SERVICE_HOST=ServerName and, for >= 1.18,
//     CILIUM_K8S_API_SERVER_URLS=https://ServerName:443. Exactly one URL either way: with more than one, a >= 1.18
//     agent moves to the `kubernetes` ClusterIP once it has synced;
//   - a pod template, which knows no node and must not change when control-plane membership does: the kubeconfig of the
//     endpoints ConfigMap (mounted as a volume, its path from the ConfigMap), and for >= 1.18, except in the agent's
//     main container, every control-plane URL from the ConfigMap, between which Cilium rotates with the kubeconfig's
//     TLS settings. The agent's main container gets no URL list (it would switch to the ClusterIP) and so dials the
//     kubeconfig's one server. Both references are optional: without the ConfigMap a pod runs as the chart made it.
//
// Nothing in the pod may contradict that: the deprecated CILIUM_K8S_API_SERVER (1.17-1.19: it replaces the URL list in
// rest_config_provider.go parseConfig) is dropped, and so are `--k8s-api-server*` and `--k8s-kubeconfig-path` flags,
// which beat the environment (Helm renders `--k8s-api-server-urls` into the `config` init container since 1.18.2). A
// pod drops the template's kubeconfig path, which would beat its one URL. Existing values, whoever set them (Helm's
// k8sServiceHost, Gardener's kubernetes-service-host webhook), are replaced in place; other env and args stay as they
// are. Applying it twice changes nothing the second time.
func pinPodSpec(spec *corev1.PodSpec, t target) {
	switch {
	case t.Pod && t.ControlPlane:
		pinContainers(spec, func(c *corev1.Container) {
			pinToURL(c, t.Version, apiserverendpoints.LocalHost, apiserverendpoints.LocalURL)
		})
	case t.Pod && !t.Endpoints.Empty():
		setHostAliases(spec, t.Endpoints.HostAliases(t.SpreadKey))
		pinContainers(spec, func(c *corev1.Container) {
			pinToURL(c, t.Version, apiserverendpoints.ServerName, apiserverendpoints.ServerURL)
		})
	default:
		// A template, or a pod off the control plane while no control-plane node is known: what its template gives.
		pinned := false
		pinContainers(spec, func(c *corev1.Container) {
			pinToKubeconfig(c, t.Version)
			pinned = true
		})
		if pinned {
			spec.Volumes = extensionswebhook.EnsureVolumeWithName(spec.Volumes, endpointsVolume())
		}
	}
}

// setHostAliases replaces the pod's aliases of the server name with aliases, unless it has the same ones in another
// order: a pod without a node gets a random start, and its second admission must not change it.
func setHostAliases(spec *corev1.PodSpec, aliases []corev1.HostAlias) {
	own := func(a corev1.HostAlias) bool { return slices.Contains(a.Hostnames, apiserverendpoints.ServerName) }
	existing := slices.DeleteFunc(slices.Clone(spec.HostAliases), func(a corev1.HostAlias) bool { return !own(a) })
	byIP := func(a, b corev1.HostAlias) int { return strings.Compare(a.IP, b.IP) }
	if slices.EqualFunc(slices.SortedFunc(slices.Values(existing), byIP), slices.SortedFunc(slices.Values(aliases), byIP),
		func(a, b corev1.HostAlias) bool { return a.IP == b.IP && slices.Equal(a.Hostnames, b.Hostnames) }) {
		return
	}
	spec.HostAliases = append(slices.DeleteFunc(spec.HostAliases, own), aliases...)
}

func pinContainers(spec *corev1.PodSpec, pin func(*corev1.Container)) {
	for _, containers := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for i := range containers {
			if cilium.TalksToAPIServer(&containers[i]) {
				pin(&containers[i])
				dropContradictions(&containers[i])
				setClientTimeouts(&containers[i])
			}
		}
	}
}

// clientTimeouts bound what a kube-apiserver that stopped answering without refusing anything (its node powered off,
// partitioned, its link down: packets are dropped) costs a container:
//
//   - on an established HTTP/2 connection, client-go pings after 4 s without a frame and closes the connection when no
//     answer comes within 4 s. With its defaults (30 s and 15 s) an agent whose control-plane node died stayed cut
//     off for 55 s on this project's datapath. The cost is a ping on a connection idle for 4 s. Cilium's own
//     heartbeat does not help: it closes the connections of rest.Config.Transport, which Cilium leaves nil;
//   - on every new connection, each dead address the hostAliases list before a live one costs a share of the dial
//     timeout: 2 s of 6 s with three control-plane nodes (Go's minimum share), where Cilium's 30 s cost 10 s, and an
//     operator that starts several clients pays it for each. A TCP handshake in a node network takes milliseconds;
//     the TLS handshake has a timeout of its own.
var clientTimeouts = map[string]string{cilium.EnvHTTP2ReadIdleTimeout: "4", cilium.EnvHTTP2PingTimeout: "4", cilium.EnvClientConnectionTimeout: "6s"}

// setClientTimeouts sets clientTimeouts in c's environment where the chart or the operator did not set them.
func setClientTimeouts(c *corev1.Container) {
	for _, name := range slices.Sorted(maps.Keys(clientTimeouts)) {
		if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == name }) {
			c.Env = append(c.Env, corev1.EnvVar{Name: name, Value: clientTimeouts[name]})
		}
	}
}

// pinToURL points a container of a pod at kube-apiserver on host, through exactly one URL on >= 1.18.
func pinToURL(c *corev1.Container, version cilium.Version, host, url string) {
	c.Env = setEnv(c.Env, cilium.EnvServiceHost, literal(host))
	c.Env = setEnv(c.Env, cilium.EnvServicePort, literal(apiserverendpoints.PortString))
	if version.SupportsAPIServerURLs() {
		c.Env = setEnv(c.Env, cilium.EnvAPIServerURLs, literal(url))
	} else {
		// 1.17 has no URL list; a stray variable would be ignored, but it would mislead whoever reads the pod.
		c.Env = extensionswebhook.EnsureNoEnvVarWithName(c.Env, cilium.EnvAPIServerURLs)
	}
	// The kubeconfig wins over the URL (rest_config_provider.go createConfig).
	c.Env = extensionswebhook.EnsureNoEnvVarWithName(c.Env, cilium.EnvKubeconfigPath)
}

// pinToKubeconfig points a container of a template at the endpoints ConfigMap's kubeconfig and, where Cilium rotates
// between them without ever moving to the ClusterIP, at every control-plane URL.
func pinToKubeconfig(c *corev1.Container, version cilium.Version) {
	c.Env = setEnv(c.Env, cilium.EnvKubeconfigPath, endpointsFromConfigMap(apiserverendpoints.KeyKubeconfigPath))
	if version.SupportsAPIServerURLs() && c.Name != cilium.AgentContainerName {
		c.Env = setEnv(c.Env, cilium.EnvAPIServerURLs, endpointsFromConfigMap(apiserverendpoints.KeyAPIServerURLs))
	} else {
		c.Env = extensionswebhook.EnsureNoEnvVarWithName(c.Env, cilium.EnvAPIServerURLs)
	}
	c.VolumeMounts = extensionswebhook.EnsureVolumeMountWithName(c.VolumeMounts, corev1.VolumeMount{
		Name: apiserverendpoints.VolumeName, MountPath: apiserverendpoints.MountPath, ReadOnly: true,
	})
}

// dropContradictions removes what would override the pinned environment: CILIUM_K8S_API_SERVER, and the API server
// flags on the command line, which Cilium reads before the environment.
func dropContradictions(c *corev1.Container) {
	c.Env = extensionswebhook.EnsureNoEnvVarWithName(c.Env, cilium.EnvAPIServer)
	c.Command = removeAPIServerFlags(c.Command)
	c.Args = removeAPIServerFlags(c.Args)
}

func literal(value string) corev1.EnvVar { return corev1.EnvVar{Value: value} }

// endpointsFromConfigMap references a key of the endpoints ConfigMap. It is optional so that a missing ConfigMap
// (the extension removed, the object deleted by hand) never keeps Cilium from starting: the variable is then unset and
// Cilium behaves as it would without this extension.
func endpointsFromConfigMap(key string) corev1.EnvVar {
	return corev1.EnvVar{ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: apiserverendpoints.ConfigMapName},
		Key:                  key,
		Optional:             new(true),
	}}}
}

// endpointsVolume is the endpoints ConfigMap's kubeconfig as a volume; optional like endpointsFromConfigMap, so that a
// missing ConfigMap leaves an empty directory that nothing names.
func endpointsVolume() corev1.Volume {
	return corev1.Volume{Name: apiserverendpoints.VolumeName, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
		LocalObjectReference: corev1.LocalObjectReference{Name: apiserverendpoints.ConfigMapName},
		Items:                []corev1.KeyToPath{{Key: apiserverendpoints.KeyKubeconfig, Path: apiserverendpoints.KeyKubeconfig}},
		DefaultMode:          new(int32(0o444)),
		Optional:             new(true),
	}}}
}

// setEnv sets the variable v.Name with Gardener's EnsureEnvVarWithName, which replaces the first of that name in place
// (keeping the order, which matters for $(VAR) references), and drops later duplicates, of which kubelet would let the
// last win.
func setEnv(env []corev1.EnvVar, name string, v corev1.EnvVar) []corev1.EnvVar {
	v.Name = name
	env = extensionswebhook.EnsureEnvVarWithName(env, v)
	first := slices.IndexFunc(env, func(e corev1.EnvVar) bool { return e.Name == name })
	return slices.Concat(env[:first+1], extensionswebhook.EnsureNoEnvVarWithName(env[first+1:], name))
}

// removeAPIServerFlags drops `--k8s-api-server[-urls]=V`, `--k8s-kubeconfig-path=V` and their `--flag V` forms from a
// command line.
func removeAPIServerFlags(args []string) []string {
	if !slices.ContainsFunc(args, isAPIServerFlag) {
		return args
	}
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		if !isAPIServerFlag(args[i]) {
			out = append(out, args[i])
			continue
		}
		if !strings.Contains(args[i], "=") && i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
			i++ // the flag's value is the next argument
		}
	}
	return out
}

func isAPIServerFlag(arg string) bool {
	name, _, _ := strings.Cut(arg, "=")
	return strings.HasPrefix(name, "--") && slices.Contains(cilium.APIServerFlags, name[2:])
}
