// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package ciliumchart

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/apiserverendpoints"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/cilium"
)

// Expected is how an API-server container of a pod must reach kube-apiserver once its environment is resolved.
type Expected struct {
	// Host, Port and URLs are KUBERNETES_SERVICE_HOST, KUBERNETES_SERVICE_PORT and CILIUM_K8S_API_SERVER_URLS; URLs is
	// empty where the variable must be unset. KeepHost: KUBERNETES_SERVICE_HOST and _PORT stay as rendered.
	Host, Port, URLs string
	KeepHost         bool
	// Kubeconfig is CILIUM_K8S_KUBECONFIG_PATH, empty where it must be unset.
	Kubeconfig string
}

// Want says what a container is expected to get.
type Want func(c corev1.Container) Expected

// apiServerVars are the variables whose value Expected describes, and clientTimeouts the client timeouts every
// container that talks to kube-apiserver gets where the chart sets none; every other variable must stay as rendered.
var (
	apiServerVars = append([]string{cilium.EnvServiceHost, cilium.EnvServicePort, cilium.EnvAPIServerURLs, cilium.EnvAPIServer,
		cilium.EnvKubeconfigPath}, cilium.ClientTimeoutVars...)
	clientTimeouts = map[string]string{cilium.EnvHTTP2ReadIdleTimeout: "4", cilium.EnvHTTP2PingTimeout: "4", cilium.EnvClientConnectionTimeout: "6s"}
)

// VerifyAdmitted compares a pod spec as kube-apiserver admitted it (defaults set) with the rendered one and lists what
// is wrong: what VerifyEnv checks, and that hostAliases resolve apiserverendpoints.ServerName to exactly hostAliases
// (none if empty).
func VerifyAdmitted(mutated, rendered *corev1.PodSpec, want Want, hostAliases []string, configMaps map[string]map[string]string) []string {
	problems := VerifyEnv(mutated, rendered, want, configMaps)
	var resolved []string
	for _, a := range mutated.HostAliases {
		if slices.Contains(a.Hostnames, apiserverendpoints.ServerName) {
			resolved = append(resolved, a.IP)
		}
	}
	if !slices.Equal(slices.Sorted(slices.Values(resolved)), slices.Sorted(slices.Values(hostAliases))) {
		problems = append(problems, fmt.Sprintf("hostAliases resolve %s to %v, want %v", apiserverendpoints.ServerName, resolved, hostAliases))
	}
	return problems
}

// VerifyPinned compares a mutated pod spec with the rendered one and lists what is wrong: what VerifyAdmitted checks;
// that the endpoints volume is there exactly when a container gets a kubeconfig; and that every other field is exactly
// as rendered.
func VerifyPinned(mutated, rendered *corev1.PodSpec, want Want, hostAliases []string, configMaps map[string]map[string]string) []string {
	problems := VerifyAdmitted(mutated, rendered, want, hostAliases, configMaps)
	renderedContainers := slices.Concat(rendered.InitContainers, rendered.Containers)
	mutatedContainers := slices.Concat(mutated.InitContainers, mutated.Containers)
	if len(renderedContainers) != len(mutatedContainers) {
		return problems
	}
	kubeconfig := false
	for i, r := range renderedContainers {
		m := mutatedContainers[i]
		rest, restMutated := r.DeepCopy(), m.DeepCopy()
		rest.Env, rest.Args, rest.Command, restMutated.Env, restMutated.Args, restMutated.Command = nil, nil, nil, nil, nil, nil
		restMutated.VolumeMounts = slices.DeleteFunc(restMutated.VolumeMounts, func(vm corev1.VolumeMount) bool {
			return vm.Name == apiserverendpoints.VolumeName
		})
		if !equality.Semantic.DeepEqual(rest, restMutated) {
			problems = append(problems, fmt.Sprintf("container %s: fields other than env, args and its volume mount changed", m.Name))
		}
		if cilium.TalksToAPIServer(&r) && want(r).Kubeconfig != "" {
			kubeconfig = true
			if !slices.ContainsFunc(m.VolumeMounts, func(vm corev1.VolumeMount) bool {
				return vm.Name == apiserverendpoints.VolumeName && vm.MountPath == apiserverendpoints.MountPath
			}) {
				problems = append(problems, fmt.Sprintf("container %s gets a kubeconfig but does not mount it", m.Name))
			}
		}
	}
	restSpec, restMutated := rendered.DeepCopy(), mutated.DeepCopy()
	restSpec.InitContainers, restSpec.Containers, restMutated.InitContainers, restMutated.Containers = nil, nil, nil, nil
	restMutated.HostAliases = slices.DeleteFunc(restMutated.HostAliases, func(a corev1.HostAlias) bool {
		return slices.Contains(a.Hostnames, apiserverendpoints.ServerName)
	})
	if len(restMutated.HostAliases) == 0 {
		restMutated.HostAliases = restSpec.HostAliases
	}
	i := slices.IndexFunc(restMutated.Volumes, func(v corev1.Volume) bool { return v.Name == apiserverendpoints.VolumeName })
	if (i >= 0) != kubeconfig {
		problems = append(problems, fmt.Sprintf("endpoints volume present: %v, want %v", i >= 0, kubeconfig))
	}
	if i >= 0 {
		restMutated.Volumes = slices.Delete(restMutated.Volumes, i, i+1)
	}
	if !equality.Semantic.DeepEqual(restSpec, restMutated) {
		problems = append(problems, "pod spec fields outside the containers, hostAliases and the endpoints volume changed")
	}
	return problems
}

// VerifyEnv compares the containers of a mutated pod spec with the rendered ones and lists what is wrong:
//   - every container that talks to kube-apiserver resolves (against configMaps, name -> data) to what want says;
//   - no `--k8s-api-server*` or `--k8s-kubeconfig-path` flag is left, and the external name appears nowhere in the
//     spec except where want keeps the rendered KUBERNETES_SERVICE_HOST;
//   - the env, args and command of every other container, and every unrelated env var, are exactly as rendered.
func VerifyEnv(mutated, rendered *corev1.PodSpec, want Want, configMaps map[string]map[string]string) []string {
	var problems []string
	renderedContainers := slices.Concat(rendered.InitContainers, rendered.Containers)
	mutatedContainers := slices.Concat(mutated.InitContainers, mutated.Containers)
	if len(renderedContainers) != len(mutatedContainers) {
		return append(problems, "containers were added or removed")
	}
	for i, r := range renderedContainers {
		m := mutatedContainers[i]
		if !cilium.TalksToAPIServer(&r) {
			if !equality.Semantic.DeepEqual(r.Env, m.Env) || !slices.Equal(r.Args, m.Args) || !slices.Equal(r.Command, m.Command) {
				problems = append(problems, fmt.Sprintf("container %s does not talk to the API server but changed", r.Name))
			}
			continue
		}
		w := want(r)
		got, rendered := ResolveEnv(m.Env, configMaps), ResolveEnv(r.Env, nil)
		if w.KeepHost {
			w.Host, w.Port = rendered[cilium.EnvServiceHost], rendered[cilium.EnvServicePort]
		} else if b, _ := json.Marshal(m); strings.Contains(string(b), ExternalHost) {
			problems = append(problems, fmt.Sprintf("container %s: the external API name is still there", m.Name))
		}
		if got[cilium.EnvServiceHost] != w.Host || got[cilium.EnvServicePort] != w.Port || got[cilium.EnvAPIServerURLs] != w.URLs ||
			got[cilium.EnvKubeconfigPath] != w.Kubeconfig {
			problems = append(problems, fmt.Sprintf("container %s: host=%q port=%q urls=%q kubeconfig=%q, want host=%q port=%q urls=%q kubeconfig=%q", m.Name,
				got[cilium.EnvServiceHost], got[cilium.EnvServicePort], got[cilium.EnvAPIServerURLs], got[cilium.EnvKubeconfigPath],
				w.Host, w.Port, w.URLs, w.Kubeconfig))
		}
		for name, value := range clientTimeouts {
			if v, ok := rendered[name]; ok {
				value = v
			}
			if got[name] != value {
				problems = append(problems, fmt.Sprintf("container %s: %s=%q, want %q", m.Name, name, got[name], value))
			}
		}
		if _, ok := got[cilium.EnvAPIServer]; ok {
			problems = append(problems, fmt.Sprintf("container %s still sets %s", m.Name, cilium.EnvAPIServer))
		}
		for _, arg := range slices.Concat(m.Command, m.Args) {
			if strings.HasPrefix(arg, "--k8s-api-server") || strings.HasPrefix(arg, "--k8s-kubeconfig-path") {
				problems = append(problems, fmt.Sprintf("container %s still has %s", m.Name, arg))
			}
		}
		if !slices.EqualFunc(otherEnv(r.Env), otherEnv(m.Env), func(a, b corev1.EnvVar) bool { return equality.Semantic.DeepEqual(a, b) }) {
			problems = append(problems, fmt.Sprintf("container %s: unrelated env changed", m.Name))
		}
	}
	return problems
}

func otherEnv(env []corev1.EnvVar) []corev1.EnvVar {
	return slices.DeleteFunc(slices.Clone(env), func(e corev1.EnvVar) bool { return slices.Contains(apiServerVars, e.Name) })
}

// ResolveEnv evaluates env as the kubelet would for the variables of interest: literal values, and ConfigMap keys from
// configMaps, name -> data (an optional reference to a missing key leaves the variable unset).
func ResolveEnv(env []corev1.EnvVar, configMaps map[string]map[string]string) map[string]string {
	out := map[string]string{}
	for _, e := range env {
		switch {
		case e.ValueFrom == nil:
			out[e.Name] = e.Value
		case e.ValueFrom.ConfigMapKeyRef != nil:
			ref := e.ValueFrom.ConfigMapKeyRef
			if v, ok := configMaps[ref.Name][ref.Key]; ok {
				out[e.Name] = v
			}
		default:
			out[e.Name] = "<unresolvable>"
		}
	}
	return out
}

// WantLocal is what every API-server container of a pod on a control-plane node gets: its own node's kube-apiserver.
func WantLocal(version string) Want {
	return wantURL(version, apiserverendpoints.LocalHost, apiserverendpoints.LocalURL)
}

// WantByName is what every API-server container of a pod off the control plane gets: the server name, which its
// hostAliases resolve to the control-plane nodes.
func WantByName(version string) Want {
	return wantURL(version, apiserverendpoints.ServerName, apiserverendpoints.ServerURL)
}

func wantURL(version, host, url string) Want {
	return func(corev1.Container) Expected {
		e := Expected{Host: host, Port: apiserverendpoints.PortString}
		if supportsURLs(version) {
			e.URLs = url
		}
		return e
	}
}

// WantTemplate is what every API-server container of a template gets: the kubeconfig and, from 1.18 on and except in
// the agent's main container, the control-plane URLs (controlPlaneURLs as the endpoints ConfigMap has them).
func WantTemplate(version, controlPlaneURLs string) Want {
	return func(c corev1.Container) Expected {
		e := Expected{KeepHost: true, Kubeconfig: apiserverendpoints.KubeconfigPath}
		if supportsURLs(version) && c.Name != cilium.AgentContainerName {
			e.URLs = controlPlaneURLs
		}
		return e
	}
}

func supportsURLs(version string) bool {
	v, _ := cilium.VersionFromImage("cilium:v" + version)
	return v.SupportsAPIServerURLs()
}
