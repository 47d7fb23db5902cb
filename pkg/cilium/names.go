// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package cilium

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ManagedResource is where networking-cilium delivers Cilium's chart to a self-hosted shoot's resource manager: its
// actuator's CiliumConfigManagedResourceName in the Network's namespace (pkg/controller/actuator_reconcile.go,
// managedresources.CreateForShoot).
var ManagedResource = client.ObjectKey{Namespace: Namespace, Name: "extension-networking-cilium-config"}

// Names of the objects that Cilium's Helm chart renders (install/kubernetes/cilium/templates in
// github.com/cilium/cilium, identical for 1.17 to 1.20) and that this extension recognises.
const (
	// Namespace is where Gardener deploys Cilium on a shoot.
	Namespace = "kube-system"

	// LabelKeyApp is the label of the agent and Envoy DaemonSets and their pods
	// (templates/cilium-agent/daemonset.yaml, templates/cilium-envoy/daemonset.yaml).
	LabelKeyApp = "k8s-app"
	// LabelValueAgent marks the agent DaemonSet and its pods.
	LabelValueAgent = "cilium"
	// LabelValueEnvoy marks the standalone Envoy DaemonSet and its pods.
	LabelValueEnvoy = "cilium-envoy"
	// LabelKeyOperator is the label of the operator Deployment and its pods
	// (templates/cilium-operator/deployment.yaml).
	LabelKeyOperator = "io.cilium/app"
	// LabelValueOperator marks the operator Deployment and its pods.
	LabelValueOperator = "operator"
	// LabelKeyPartOf with LabelValuePartOf marks every pod of the chart, the agent's, Envoy's and the operator's
	// among them: the one label all three share.
	LabelKeyPartOf   = "app.kubernetes.io/part-of"
	LabelValuePartOf = "cilium"

	// ConfigMapName is the agent and operator configuration (templates/cilium-configmap.yaml). It carries no labels.
	ConfigMapName = "cilium-config"
	// AgentContainerName is the agent's main container; its image tag is the Cilium version.
	AgentContainerName = "cilium-agent"
)

// IsWorkload tells whether labels are those of Cilium's agent, Envoy or operator (workload or pod).
func IsWorkload(labels map[string]string) bool {
	return slices.Contains([]string{LabelValueAgent, LabelValueEnvoy}, labels[LabelKeyApp]) || labels[LabelKeyOperator] == LabelValueOperator
}

// APIServerContainers are the containers of Cilium's chart that talk to kube-apiserver, which is exactly where the chart
// renders KUBERNETES_SERVICE_HOST/PORT: the agent and its init containers `config` (`cilium-dbg build-config`) and
// `clean-cilium-state`, the operator, Envoy, and Envoy's 1.20 init container `lookup-bootstrap-locality`. The sidecar
// `cilium-monitor` and the other init containers (mount-cgroup, apply-sysctl-overwrites, ...) never do.
var APIServerContainers = []string{
	AgentContainerName, "config", "clean-cilium-state",
	"cilium-operator",
	"cilium-envoy", "lookup-bootstrap-locality",
}

// TalksToAPIServer tells whether a container talks to kube-apiserver: one of APIServerContainers (Gardener's chart
// leaves the agent's environment to kubelet), or any other container that someone already pointed at an API server.
func TalksToAPIServer(c *corev1.Container) bool {
	return slices.Contains(APIServerContainers, c.Name) ||
		slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == EnvServiceHost })
}

// Environment variables and flags that decide which kube-apiserver a Cilium component uses.
//
// pkg/k8s/client/rest_config_provider.go restConfigManager.createConfig (1.18-1.20; pkg/k8s/client/cell.go createConfig
// in 1.17) picks, in this order: `k8s-kubeconfig-path`; `k8s-api-server` (1.17-1.19, which replaces the URL list in
// parseConfig); one of `k8s-api-server-urls` (1.18+); and otherwise rest.InClusterConfig(), i.e.
// https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT. Every option is a hive flag, bound to the environment as
// CILIUM_<FLAG> (pkg/hive/hive.go, EnvPrefix "CILIUM_"), so a value comes from the command line, then the environment,
// then the config directory (the `cilium-config` ConfigMap, merged as viper's config layer by pkg/option/config.go
// InitConfig -> ReadDirConfig -> MergeConfig), in viper's order.
const (
	EnvServiceHost    = "KUBERNETES_SERVICE_HOST"
	EnvServicePort    = "KUBERNETES_SERVICE_PORT"
	EnvAPIServerURLs  = "CILIUM_K8S_API_SERVER_URLS"
	EnvAPIServer      = "CILIUM_K8S_API_SERVER"
	EnvKubeconfigPath = "CILIUM_K8S_KUBECONFIG_PATH"

	// FlagAPIServerURLs, FlagAPIServer and FlagKubeconfigPath are also the keys of these options in `cilium-config`.
	FlagAPIServerURLs  = "k8s-api-server-urls"
	FlagAPIServer      = "k8s-api-server"
	FlagKubeconfigPath = "k8s-kubeconfig-path"
)

// How fast a client notices that kube-apiserver stopped answering.
const (
	// EnvHTTP2ReadIdleTimeout and EnvHTTP2PingTimeout are read by client-go's transport in every Cilium binary
	// (k8s.io/apimachinery/pkg/util/net/http.go readIdleTimeoutSeconds and pingTimeoutSeconds, there since Kubernetes
	// 1.20, kubernetes#95981; Cilium 1.17 builds apimachinery v0.32, 1.18 Cilium's fork of v0.33, 1.19 v0.35, 1.20
	// v0.36): an HTTP/2 connection that carried no frame for the first is pinged, and closed when the ping is not
	// answered within the second. They default to 30 s and 15 s. The 1.18 fork (github.com/cilium/apimachinery
	// v0.33.3-1, which the module proxy does not serve) is, by Cilium's go.mod, upstream v0.33.3 with patches for
	// `omitzero` JSON tags in converters; upstream v0.33.3 reads both variables (http.go lines 148 and 162).
	EnvHTTP2ReadIdleTimeout = "HTTP2_READ_IDLE_TIMEOUT_SECONDS"
	EnvHTTP2PingTimeout     = "HTTP2_PING_TIMEOUT_SECONDS"
	// EnvClientConnectionTimeout is the dial timeout of the kube-apiserver client of the agent, the operator and
	// `cilium-dbg build-config` (the hive flag k8s-client-connection-timeout of pkg/k8s/client: net.Dialer{Timeout:
	// K8sClientConnectionTimeout} in cell.go; 30 s by default in 1.17 to 1.20). Go's dialer splits it over a name's
	// addresses (net/dial.go dialSerial, partialDeadline: an equal share each, at least 2 s).
	EnvClientConnectionTimeout = "CILIUM_K8S_CLIENT_CONNECTION_TIMEOUT"
)

// ClientTimeoutVars are the variables of those client timeouts.
var ClientTimeoutVars = []string{EnvHTTP2ReadIdleTimeout, EnvHTTP2PingTimeout, EnvClientConnectionTimeout}

// APIServerFlags are the options that decide which kube-apiserver a component uses.
var APIServerFlags = []string{FlagAPIServerURLs, FlagAPIServer, FlagKubeconfigPath}

// L2AnnouncementLeaseName is the lease in Namespace through which Cilium's agents elect the node that announces a
// Service by L2, held under the node's name (pkg/l2announcer newLeaseLock: cilium-l2announce-<namespace>-<name>).
func L2AnnouncementLeaseName(serviceNamespace, serviceName string) string {
	return "cilium-l2announce-" + serviceNamespace + "-" + serviceName
}
