// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

// Package apiserverendpoints derives how Cilium reaches kube-apiserver on a self-hosted shoot without depending on
// anything Cilium provides itself, and builds the ConfigMap that carries the control-plane endpoints to Cilium pods.
//
// On a self-hosted shoot kube-apiserver is a hostNetwork static pod on every control-plane node, listening on port 443.
// Its serving certificate (gardener pkg/component/kubernetes/apiserver/secrets.go reconcileSecretServer, plus
// pkg/gardenlet/operation/botanist/kubeapiserver.go computeKubeAPIServerServerCertificateConfig) holds the DNS names of
// the `kube-apiserver` and `kubernetes` Services, localhost, 127.0.0.1, ::1, the `kubernetes` ClusterIPs, the technical
// ID and the api.<domain> names, but no node IP. So:
//
//   - a component on a control-plane node uses https://localhost:443, its own node's kube-apiserver;
//   - any other dials the control-plane nodes' InternalIPs, but verifies the certificate under ServerName, a name the
//     certificate holds: either as the host of its one URL, resolved to those IPs by hostAliases in the pod's
//     /etc/hosts, or as the tls-server-name of the Kubeconfig this package builds.
//
// The `kubernetes` ClusterIP (served by Cilium's kube-proxy replacement), the exposure VIP (announced by Cilium) and
// the external domain (resolving to that VIP) are never used.
package apiserverendpoints

import (
	"hash/fnv"
	"net/netip"
	"path"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	v1beta1constants "github.com/gardener/gardener/pkg/apis/core/v1beta1/constants"
	kubernetesutils "github.com/gardener/gardener/pkg/utils/kubernetes"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/cilium"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/identity"
)

const (
	// Port is kube-apiserver's secure port on self-hosted shoots (gardener kubeapiserverconstants.Port).
	Port = 443
	// LocalHost is how a component on a control-plane node reaches the kube-apiserver of its own node.
	LocalHost = "localhost"

	// ConfigMapName is the ConfigMap in kube-system that this extension keeps current from the control-plane Nodes.
	// Cilium's pod templates reference it, so a pod created while the webhook is unreachable still avoids the VIP.
	ConfigMapName = "cilium-selfhosted-apiserver-endpoints"
	// KeyAPIServerURLs holds all control-plane endpoints as a comma-separated list of https URLs of their InternalIPs,
	// which Cilium's config decoder splits (cilium/hive cell/config.go decoderConfig: StringToSliceHookFunc(",")). Only
	// together with the Kubeconfig, which names the certificate's ServerName, do they verify.
	KeyAPIServerURLs = cilium.EnvAPIServerURLs
	// KeyKubeconfigPath holds KubeconfigPath, so that a template's environment names the kubeconfig only while the
	// ConfigMap (and so the file) exists.
	KeyKubeconfigPath = cilium.EnvKubeconfigPath
	// KeyKubeconfig holds the Kubeconfig.
	KeyKubeconfig = "kubeconfig"

	// VolumeName is the volume of the endpoints ConfigMap in Cilium's pod templates, mounted at MountPath.
	VolumeName = "cilium-selfhosted-apiserver"
	// MountPath is where the endpoints ConfigMap is mounted.
	MountPath = "/var/lib/cilium-selfhosted-apiserver"

	// ServiceAccountDir is where kubelet mounts a pod's service-account token and CA.
	ServiceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"
)

var (
	// PortString is Port as an environment value.
	PortString = strconv.Itoa(Port)

	// LocalURL is the one API server URL of a Cilium component on a control-plane node. Exactly one: with more than one
	// URL a >= 1.18 agent moves its client to the `kubernetes` ClusterIP once it has synced
	// (pkg/k8s/client/rest_config_provider.go: canRotateAPIServerURL is len(apiServerURLs) > 1, and only then
	// registerMappingsUpdater switches to the service in updateMappings).
	LocalURL = URL(LocalHost)

	// ServerName is the name under which components off the control plane verify kube-apiserver's certificate:
	// kube-apiserver.kube-system.svc.cluster.local, which Gardener puts into every kube-apiserver certificate
	// (kubernetesutils.DNSNamesForService of the kube-apiserver Deployment in its namespace). On a self-hosted shoot no
	// `kube-apiserver` Service exists (gardenlet's shoot flow skips "Deploying Kubernetes API server service" when
	// IsSelfHosted, pkg/gardenlet/controller/shoot/shoot/reconciler_reconcile.go), so the name resolves to nothing but
	// what a pod's hostAliases say: never to the ClusterIP, the VIP or the external domain.
	ServerName = kubernetesutils.FQDNForService(v1beta1constants.DeploymentNameKubeAPIServer, metav1.NamespaceSystem)
	// ServerURL is the one API server URL of a Cilium pod off the control plane; its hostAliases resolve ServerName to
	// every control-plane InternalIP, and Go's dialer tries them in turn.
	ServerURL = URL(ServerName)

	// KubeconfigPath is where a container finds the Kubeconfig.
	KubeconfigPath = path.Join(MountPath, KeyKubeconfig)
)

// URL is the https URL of kube-apiserver on host (an IP, bracketed if IPv6, or a name).
func URL(host string) string {
	if addr, err := netip.ParseAddr(host); err == nil {
		return "https://" + netip.AddrPortFrom(addr, Port).String()
	}
	return "https://" + host + ":" + PortString
}

// IsControlPlaneNode tells whether a Node runs kube-apiserver or is joining to run it, which decides what the node's
// own Cilium pods get (their own kube-apiserver at localhost). kubelet registers a node of the control-plane pool with
// the taint node-role.kubernetes.io/control-plane (gardener pkg/component/extensions/operatingsystemconfig
// operatingsystemconfig.go, kubelet's RegisterWithTaints); gardener-node-agent adds the label of the same key only
// afterwards (pkg/nodeagent/controller/operatingsystemconfig/reconciler.go). The DaemonSet controller creates a node's
// Cilium pod as soon as the node is registered, so either one counts here.
func IsControlPlaneNode(node *corev1.Node) bool {
	return IsMember(node) || slices.ContainsFunc(node.Spec.Taints, func(t corev1.Taint) bool {
		return t.Key == v1beta1constants.LabelNodeRoleControlPlane
	})
}

// IsMember tells whether other nodes' Cilium may trust a Node to serve kube-apiserver: it has the control-plane label.
// Any kubelet may register its Node with any taint, the control-plane one included (NodeRestriction checks only the
// labels of a Node being created: k8s.io/kubernetes plugin/pkg/admission/noderestriction/admission.go admitNode),
// but not with that label, which gardener-node-agent sets and by which Gardener itself selects the control-plane
// Nodes (pkg/gardenlet/controller/shoot/selfhostedshootexposure/reconciler.go); the chart's policy
// -guard-control-plane-membership keeps everyone else from changing it or a member's addresses.
func IsMember(node *corev1.Node) bool {
	_, ok := node.Labels[v1beta1constants.LabelNodeRoleControlPlane]
	return ok
}

// ControlPlaneNodes are the names of the control-plane nodes among nodes.
func ControlPlaneNodes(nodes []corev1.Node) sets.Set[string] {
	names := sets.New[string]()
	for i := range nodes {
		if IsControlPlaneNode(&nodes[i]) {
			names.Insert(nodes[i].Name)
		}
	}
	return names
}

// ControlPlane are the kube-apiserver addresses of all control-plane nodes.
type ControlPlane struct {
	// Addresses are the nodes' InternalIPs, unique: those of Ready nodes first, then the others, each part sorted (IPv4
	// before IPv6), so that every reader sees the same list and a client that takes the first address, or tries them
	// in order, starts at a node that is up.
	Addresses []netip.Addr
	// Ready is how many of Addresses, from the start, belong to Ready nodes.
	Ready int
}

// FromNodes collects the InternalIPs of the control-plane nodes among nodes, those of Ready nodes first. Other address
// types are left out: a hostname or external name may resolve to the VIP. So are addresses no other node can reach
// (loopback, link-local, unspecified, multicast) and addresses with a zone, which a pod's hostAliases refuse.
func FromNodes(nodes []corev1.Node) ControlPlane {
	var ready, others []netip.Addr
	for i := range nodes {
		if !IsMember(&nodes[i]) {
			continue
		}
		part := &others
		if IsReady(&nodes[i]) {
			part = &ready
		}
		for _, a := range nodes[i].Status.Addresses {
			if a.Type != corev1.NodeInternalIP {
				continue
			}
			if addr, err := netip.ParseAddr(a.Address); err == nil && addr.Zone() == "" && addr.Unmap().IsGlobalUnicast() {
				*part = append(*part, addr.Unmap())
			}
		}
	}
	slices.SortFunc(ready, netip.Addr.Compare)
	ready = slices.Compact(ready)
	slices.SortFunc(others, netip.Addr.Compare)
	// An address two nodes claim counts as Ready when one of them is.
	others = slices.DeleteFunc(slices.Compact(others), func(a netip.Addr) bool { return slices.Contains(ready, a) })
	return ControlPlane{Addresses: slices.Concat(ready, others), Ready: len(ready)}
}

// IsReady tells whether the node's kubelet reports it Ready, as the node lifecycle controller keeps it: a node that is
// down, partitioned or still joining is not.
func IsReady(node *corev1.Node) bool {
	return slices.ContainsFunc(node.Status.Conditions, func(c corev1.NodeCondition) bool {
		return c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue
	})
}

// ReadyChanged tells whether a node's Ready condition changed between old and new.
func ReadyChanged(old, new *corev1.Node) bool { return IsReady(old) != IsReady(new) }

// Has tells whether addr is one of the control-plane addresses.
func (c ControlPlane) Has(addr netip.Addr) bool { return slices.Contains(c.Addresses, addr.Unmap()) }

// Empty tells whether no control-plane endpoint is known.
func (c ControlPlane) Empty() bool { return len(c.Addresses) == 0 }

// URLs are the https URLs of all control-plane nodes' InternalIPs.
func (c ControlPlane) URLs() []string {
	urls := make([]string, 0, len(c.Addresses))
	for _, a := range c.Addresses {
		urls = append(urls, URL(a.String()))
	}
	return urls
}

// HostAliases resolve ServerName to every control-plane address, one entry per address: the Ready nodes' addresses
// first, starting at the one that key picks, then the others. kubelet writes them, in this order, into the pod's
// /etc/hosts, for hostNetwork pods too (pkg/kubelet/kubelet_pods.go nodeHostsFileContent); Go's resolver returns a
// name's addresses from the hosts file in file order and the dialer tries them one after the other. A different start
// per node spreads the nodes' Cilium pods over the Ready control-plane nodes; the rest of the list is the failover,
// and an address of a node that is down costs a dial only after every Ready one failed.
func (c ControlPlane) HostAliases(key string) []corev1.HostAlias {
	if c.Empty() {
		return nil
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	aliases := make([]corev1.HostAlias, 0, len(c.Addresses))
	for _, part := range [][]netip.Addr{c.Addresses[:c.Ready], c.Addresses[c.Ready:]} {
		if len(part) == 0 {
			continue
		}
		start := int(h.Sum32() % uint32(len(part)))
		for i := range part {
			aliases = append(aliases, corev1.HostAlias{IP: part[(start+i)%len(part)].String(), Hostnames: []string{ServerName}})
		}
	}
	return aliases
}

// KubeconfigPrefix and KubeconfigSuffix enclose the one variable of the endpoints ConfigMap's kubeconfig, its server
// URL. Every template-created Cilium pod loads that kubeconfig with clientcmd, where an exec entry or a skipped TLS
// verification would run code in, or steal the token of, the agent on every node. Admission policies cannot parse
// YAML, so the chart's policy (templates/admissionpolicy.yaml, endpoints-configmap-shape) checks the kubeconfig
// character for character against these constants around the first URL, for every writer; a test keeps both equal.
// The text holds no quote and no backslash, so that the policy can carry it as a CEL raw string.
const (
	KubeconfigPrefix = `apiVersion: v1
kind: Config
clusters:
- name: kube-apiserver
  cluster:
    certificate-authority: /var/run/secrets/kubernetes.io/serviceaccount/ca.crt
    tls-server-name: kube-apiserver.kube-system.svc.cluster.local
    server: `
	KubeconfigSuffix = `
users:
- name: kube-apiserver
  user:
    tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token
contexts:
- name: kube-apiserver
  context:
    cluster: kube-apiserver
    user: kube-apiserver
current-context: kube-apiserver
`
)

// Kubeconfig is the kubeconfig of a pod template's containers: the first control-plane address (a Ready node's, when
// any is Ready) as server, verified under ServerName against the pod's service-account CA, authenticated with the
// pod's service-account token (client-go re-reads the token file, so rotated tokens are used). Cilium also sends
// requests to the URLs of CILIUM_K8S_API_SERVER_URLS when it has several, with this kubeconfig's TLS settings
// (rest_config_provider.go createConfig wraps the kubeconfig's transport in its rotating round tripper), which is how
// a template-created operator fails over.
func (c ControlPlane) Kubeconfig() string {
	if c.Empty() {
		return ""
	}
	return KubeconfigPrefix + c.URLs()[0] + KubeconfigSuffix
}

// Data is the content of the endpoints ConfigMap.
func (c ControlPlane) Data() map[string]string {
	return map[string]string{
		KeyAPIServerURLs:  strings.Join(c.URLs(), ","),
		KeyKubeconfigPath: KubeconfigPath,
		KeyKubeconfig:     c.Kubeconfig(),
	}
}

// ConfigMap is the endpoints ConfigMap for server-side apply.
func ConfigMap(c ControlPlane) *corev1ac.ConfigMapApplyConfiguration {
	return corev1ac.ConfigMap(ConfigMapName, cilium.Namespace).
		WithLabels(identity.ManagedBy()).
		WithData(c.Data())
}
