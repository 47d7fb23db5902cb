package ciliumchart

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/cilium"
)

// Expected is how every API-server container of a pod must reach kube-apiserver once resolved; URLs is empty where
// the Cilium version has no URL list.
type Expected struct {
	Host, Port, URLs string
}

// apiServerVars are the variables whose value Expected describes; every other one must stay as rendered.
var apiServerVars = []string{cilium.EnvServiceHost, cilium.EnvServicePort, cilium.EnvAPIServerURLs, cilium.EnvAPIServer}

// VerifyPinned compares a mutated pod spec with the rendered one and lists what is wrong: what VerifyEnv checks, and
// that every field outside env, args and command is exactly as rendered.
func VerifyPinned(mutated, rendered *corev1.PodSpec, want Expected, configMaps map[string]map[string]string) []string {
	problems := VerifyEnv(mutated, rendered, want, configMaps)
	renderedContainers := slices.Concat(rendered.InitContainers, rendered.Containers)
	mutatedContainers := slices.Concat(mutated.InitContainers, mutated.Containers)
	if len(renderedContainers) != len(mutatedContainers) {
		return problems
	}
	for i, r := range renderedContainers {
		m := mutatedContainers[i]
		rest, restMutated := r.DeepCopy(), m.DeepCopy()
		rest.Env, rest.Args, rest.Command, restMutated.Env, restMutated.Args, restMutated.Command = nil, nil, nil, nil, nil, nil
		if !equality.Semantic.DeepEqual(rest, restMutated) {
			problems = append(problems, fmt.Sprintf("container %s: fields other than env and args changed", m.Name))
		}
	}
	restSpec, restMutated := rendered.DeepCopy(), mutated.DeepCopy()
	restSpec.InitContainers, restSpec.Containers, restMutated.InitContainers, restMutated.Containers = nil, nil, nil, nil
	if !equality.Semantic.DeepEqual(restSpec, restMutated) {
		problems = append(problems, "pod spec fields outside the containers changed")
	}
	return problems
}

// VerifyEnv compares the containers of a mutated pod spec with the rendered ones and lists what is wrong:
//   - every container that the chart pointed at kube-apiserver resolves (against configMaps, name -> data) to want;
//   - no `--k8s-api-server*` flag is left, and the external name appears nowhere in the spec;
//   - the env, args and command of every other container, and every unrelated env var, are exactly as rendered.
//
// It leaves the other fields alone, which kube-apiserver defaults.
func VerifyEnv(mutated, rendered *corev1.PodSpec, want Expected, configMaps map[string]map[string]string) []string {
	var problems []string
	if b, _ := json.Marshal(mutated); strings.Contains(string(b), ExternalHost) {
		problems = append(problems, "the external API name is still in the spec")
	}

	renderedContainers := slices.Concat(rendered.InitContainers, rendered.Containers)
	mutatedContainers := slices.Concat(mutated.InitContainers, mutated.Containers)
	if len(renderedContainers) != len(mutatedContainers) {
		return append(problems, "containers were added or removed")
	}
	for i, r := range renderedContainers {
		m := mutatedContainers[i]
		if !pointsAtAPIServer(r) {
			if !equality.Semantic.DeepEqual(r.Env, m.Env) || !slices.Equal(r.Args, m.Args) || !slices.Equal(r.Command, m.Command) {
				problems = append(problems, fmt.Sprintf("container %s does not talk to the API server but changed", r.Name))
			}
			continue
		}
		got := ResolveEnv(m.Env, configMaps)
		if got[cilium.EnvServiceHost] != want.Host || got[cilium.EnvServicePort] != want.Port || got[cilium.EnvAPIServerURLs] != want.URLs {
			problems = append(problems, fmt.Sprintf("container %s: host=%q port=%q urls=%q, want host=%q port=%q urls=%q", m.Name,
				got[cilium.EnvServiceHost], got[cilium.EnvServicePort], got[cilium.EnvAPIServerURLs], want.Host, want.Port, want.URLs))
		}
		if _, ok := got[cilium.EnvAPIServer]; ok {
			problems = append(problems, fmt.Sprintf("container %s still sets %s", m.Name, cilium.EnvAPIServer))
		}
		for _, arg := range slices.Concat(m.Command, m.Args) {
			if strings.HasPrefix(arg, "--k8s-api-server") {
				problems = append(problems, fmt.Sprintf("container %s still has %s", m.Name, arg))
			}
		}
		if !slices.EqualFunc(otherEnv(r.Env), otherEnv(m.Env), func(a, b corev1.EnvVar) bool { return equality.Semantic.DeepEqual(a, b) }) {
			problems = append(problems, fmt.Sprintf("container %s: unrelated env changed", m.Name))
		}
	}
	return problems
}

// pointsAtAPIServer: the chart rendered the API server environment into this container.
func pointsAtAPIServer(c corev1.Container) bool {
	return slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == cilium.EnvServiceHost })
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
