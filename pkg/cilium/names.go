// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package cilium

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ManagedResource is where networking-cilium delivers Cilium's chart to a self-hosted shoot's resource manager.
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

// APIServerContainers are the containers of Cilium's chart that talk to kube-apiserver: exactly where the chart renders
// KUBERNETES_SERVICE_HOST/PORT (docs/apiserver-access.md, "What decides a Cilium component's kube-apiserver").
var APIServerContainers = []string{
	AgentContainerName, "config", "clean-cilium-state",
	"cilium-operator",
	"cilium-envoy", "lookup-bootstrap-locality",
}

// TalksToAPIServer tells whether a container talks to kube-apiserver: one of APIServerContainers, or any other container
// that someone already pointed at an API server.
func TalksToAPIServer(c *corev1.Container) bool {
	return slices.Contains(APIServerContainers, c.Name) ||
		slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == EnvServiceHost })
}

// Environment variables and flags that decide which kube-apiserver a Cilium component uses, in the order of Cilium's
// createConfig (docs/apiserver-access.md, "What decides a Cilium component's kube-apiserver").
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
	// EnvHTTP2ReadIdleTimeout and EnvHTTP2PingTimeout are read by client-go's transport in every Cilium binary: an HTTP/2
	// connection without a frame for the first is pinged and closed when the ping is not answered within the second
	// (docs/apiserver-access.md, "What decides a Cilium component's kube-apiserver").
	EnvHTTP2ReadIdleTimeout = "HTTP2_READ_IDLE_TIMEOUT_SECONDS"
	EnvHTTP2PingTimeout     = "HTTP2_PING_TIMEOUT_SECONDS"
	// EnvClientConnectionTimeout is the dial timeout of the kube-apiserver client of the agent, the operator and
	// `cilium-dbg build-config`, which Go's dialer splits over a name's addresses.
	EnvClientConnectionTimeout = "CILIUM_K8S_CLIENT_CONNECTION_TIMEOUT"
)

// ClientTimeoutVars are the variables of those client timeouts.
var ClientTimeoutVars = []string{EnvHTTP2ReadIdleTimeout, EnvHTTP2PingTimeout, EnvClientConnectionTimeout}

// APIServerFlags are the options that decide which kube-apiserver a component uses.
var APIServerFlags = []string{FlagAPIServerURLs, FlagAPIServer, FlagKubeconfigPath}

// L2AnnouncementLeaseName is the lease in Namespace through which Cilium's agents elect the node that announces a
// Service by L2, held under the node's name.
func L2AnnouncementLeaseName(serviceNamespace, serviceName string) string {
	return "cilium-l2announce-" + serviceNamespace + "-" + serviceName
}
