// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

// Package apiserverendpoints derives how Cilium reaches kube-apiserver on a self-hosted shoot without anything Cilium
// provides itself: localhost on a control-plane node, elsewhere the control-plane InternalIPs verified under
// ServerName; never the ClusterIP, the VIP or the external domain (docs/apiserver-access.md). It also builds the
// ConfigMap that carries the control-plane endpoints to Cilium's pod templates.
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

	// ConfigMapName is the ConfigMap in kube-system that this extension keeps current from the control-plane Nodes,
	// which Cilium's pod templates reference.
	ConfigMapName = "cilium-selfhosted-apiserver-endpoints"
	// KeyAPIServerURLs holds the control-plane URLs, comma-separated as Cilium's config decoder splits them; they verify
	// only with the Kubeconfig's server name.
	KeyAPIServerURLs = cilium.EnvAPIServerURLs
	// KeyKubeconfigPath holds KubeconfigPath: a template names the kubeconfig only while the ConfigMap exists.
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

	// LocalURL is the one API server URL of a Cilium component on a control-plane node: with more than one, an agent
	// moves to the ClusterIP (docs/apiserver-access.md, "Exactly one URL per pod").
	LocalURL = URL(LocalHost)

	// ServerName is the name under which components off the control plane verify kube-apiserver's certificate: in every
	// certificate Gardener issues, and with no Service of that name on a self-hosted shoot it resolves only to what a
	// pod's hostAliases say (docs/apiserver-access.md, "What each pod gets").
	ServerName = kubernetesutils.FQDNForService(v1beta1constants.DeploymentNameKubeAPIServer, metav1.NamespaceSystem)
	// ServerURL is the one API server URL of a Cilium pod off the control plane.
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

// IsControlPlaneNode tells whether a Node runs kube-apiserver or is joining to run it, by the control-plane taint
// kubelet registers or the label gardener-node-agent adds later; it decides what the node's own Cilium pods get
// (docs/apiserver-access.md, "What each pod gets").
func IsControlPlaneNode(node *corev1.Node) bool {
	return IsMember(node) || slices.ContainsFunc(node.Spec.Taints, func(t corev1.Taint) bool {
		return t.Key == v1beta1constants.LabelNodeRoleControlPlane
	})
}

// IsMember tells whether other nodes' Cilium may trust a Node to serve kube-apiserver: it has the control-plane label,
// which, unlike the taint, no kubelet can give itself (docs/apiserver-access.md, "What each pod gets").
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
	// Addresses are the nodes' InternalIPs, unique: those of Ready nodes first, then the others, each part sorted, so
	// that every reader sees the same list and a client trying them in order starts at a node that is up.
	Addresses []netip.Addr
	// Ready is how many of Addresses, from the start, belong to Ready nodes.
	Ready int
}

// FromNodes collects the InternalIPs of the control-plane nodes among nodes, those of Ready nodes first; other address
// types may lead to the VIP, and addresses no other node can reach or with a zone are left out.
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

// IsReady tells whether the node's kubelet reports it Ready.
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

// HostAliases resolve ServerName to every control-plane address in the order a pod's dialer tries them: the Ready
// nodes' first, starting at the one that key picks (the spread), then the others (docs/apiserver-access.md, "Why
// these mechanisms").
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
// URL: the chart's policy endpoints-configmap-shape compares the kubeconfig with them character for character (a test
// keeps both equal), so that no writer can slip an exec entry or skipped verification into every Cilium pod
// (docs/operations/security.md, "What the extension's token can and cannot do"). They hold no quote and no
// backslash, for a CEL raw string.
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

// Kubeconfig is the kubeconfig of a pod template's containers: the first control-plane address as server, verified
// under ServerName against the pod's service-account CA, with the pod's token file (docs/apiserver-access.md,
// "Templates").
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
