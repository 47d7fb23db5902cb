package apiserveraccess

import (
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/apiserverendpoints"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/cilium"
)

// Target says where a pod spec runs and what its Cilium version understands.
type Target struct {
	// ControlPlane is true for a pod on a control-plane node: it talks to the kube-apiserver of its own node.
	// Otherwise, and for templates, the spec references the endpoints ConfigMap of the control-plane nodes.
	ControlPlane bool
	// Version is the Cilium version of the workload.
	Version cilium.Version
}

// PinPodSpec makes every container of spec that talks to kube-apiserver reach it without Cilium's help:
//
//   - control-plane node: KUBERNETES_SERVICE_HOST=localhost, KUBERNETES_SERVICE_PORT=443 and, for Cilium >= 1.18,
//     CILIUM_K8S_API_SERVER_URLS=https://localhost:443 (exactly one URL, see apiserverendpoints.LocalURL);
//   - anywhere else: KUBERNETES_SERVICE_HOST and, for >= 1.18, CILIUM_K8S_API_SERVER_URLS from the endpoints ConfigMap
//     (the control-plane InternalIPs; Cilium fails over between the URLs at start-up in waitForConn), port 443.
//
// Nothing in the pod may contradict that: the deprecated CILIUM_K8S_API_SERVER (1.17-1.19: it replaces the URL list in
// rest_config_provider.go parseConfig) is dropped, and so are `--k8s-api-server*` flags, which beat the environment
// (Helm renders `--k8s-api-server-urls` into the `config` init container since 1.18.2). Existing values, whoever set
// them (Helm's k8sServiceHost, Gardener's kubernetes-service-host webhook), are replaced in place; other env and args
// stay as they are. Applying it twice changes nothing the second time.
func PinPodSpec(spec *corev1.PodSpec, t Target) {
	for i := range spec.InitContainers {
		pinContainer(&spec.InitContainers[i], t)
	}
	for i := range spec.Containers {
		pinContainer(&spec.Containers[i], t)
	}
}

func pinContainer(c *corev1.Container, t Target) {
	if !talksToAPIServer(c) {
		return
	}

	host, urls := endpointsFromConfigMap(apiserverendpoints.KeyServiceHost), endpointsFromConfigMap(apiserverendpoints.KeyAPIServerURLs)
	if t.ControlPlane {
		host, urls = literal(apiserverendpoints.LocalHost), literal(apiserverendpoints.LocalURL)
	}

	c.Env = setEnv(c.Env, cilium.EnvServiceHost, host)
	c.Env = setEnv(c.Env, cilium.EnvServicePort, literal(apiserverendpoints.PortString))
	if t.Version.SupportsAPIServerURLs() {
		c.Env = setEnv(c.Env, cilium.EnvAPIServerURLs, urls)
	} else {
		// 1.17 has no URL list; a stray variable would be ignored, but it would mislead whoever reads the pod.
		c.Env = removeEnv(c.Env, cilium.EnvAPIServerURLs)
	}
	c.Env = removeEnv(c.Env, cilium.EnvAPIServer)
	c.Command = removeAPIServerFlags(c.Command)
	c.Args = removeAPIServerFlags(c.Args)
}

// talksToAPIServer: the containers where Cilium's chart renders the API server environment, and any other container
// that someone already pointed at an API server.
func talksToAPIServer(c *corev1.Container) bool {
	return slices.Contains(cilium.APIServerContainers, c.Name) ||
		slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == cilium.EnvServiceHost })
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

// setEnv sets name to the value or source of v, in place if it exists (keeping the order, which matters for
// $(VAR) references), appended otherwise. Duplicates of name are dropped.
func setEnv(env []corev1.EnvVar, name string, v corev1.EnvVar) []corev1.EnvVar {
	v.Name = name
	i := slices.IndexFunc(env, func(e corev1.EnvVar) bool { return e.Name == name })
	if i < 0 {
		return append(env, v)
	}
	env[i] = v
	return slices.Concat(env[:i+1], removeEnv(env[i+1:], name))
}

func removeEnv(env []corev1.EnvVar, name string) []corev1.EnvVar {
	return slices.DeleteFunc(env, func(e corev1.EnvVar) bool { return e.Name == name })
}

var apiServerFlags = []string{"--" + cilium.FlagAPIServerURLs, "--" + cilium.FlagAPIServer}

// removeAPIServerFlags drops `--k8s-api-server[-urls]=V` and `--k8s-api-server[-urls] V` from a command line.
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
	return slices.Contains(apiServerFlags, name)
}

// CleanConfig removes the API server options from the `cilium-config` data, which every agent and the operator read
// as their config directory. `k8s-api-server` is an option of its own that the environment of PinPodSpec does not
// override and that replaces the URL list (1.17-1.19, rest_config_provider.go parseConfig; cell.go createConfig in
// 1.17); `k8s-api-server-urls` is overridden by CILIUM_K8S_API_SERVER_URLS, but would still name the VIP or the
// external domain to whoever reads it. It reports whether it changed anything.
func CleanConfig(data map[string]string) bool {
	changed := false
	for _, key := range []string{cilium.FlagAPIServerURLs, cilium.FlagAPIServer} {
		if _, ok := data[key]; ok {
			delete(data, key)
			changed = true
		}
	}
	return changed
}
