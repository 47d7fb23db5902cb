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
// Gardener's certificate (docs/apiserver-access.md, "What each pod gets"): a pod on a control-plane node localhost, any
// other pod hostAliases of apiserverendpoints.ServerName and exactly one URL, a pod template the endpoints ConfigMap's
// kubeconfig and, but in the agent's main container, its URL list. Whatever would contradict that is dropped or
// replaced in place ("Nothing may contradict the pinning"); other env and args stay, and a second pass changes nothing.
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

// clientTimeouts bound what a kube-apiserver that stopped answering without refusing anything costs a container: 8 s
// on an established connection, 2 s per dead address on a new one (docs/apiserver-access.md, "Why the webhook sets
// client timeouts").
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

// endpointsFromConfigMap references a key of the endpoints ConfigMap, optionally: without the ConfigMap Cilium starts as
// it would without this extension.
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

// setEnv sets the variable v.Name with Gardener's EnsureEnvVarWithName, in place of the first of that name, and drops
// later duplicates, of which kubelet would let the last win.
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
