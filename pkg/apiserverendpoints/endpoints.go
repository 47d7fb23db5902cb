// Package apiserverendpoints derives how Cilium reaches kube-apiserver on a self-hosted shoot without depending on
// anything Cilium provides itself, and builds the ConfigMap that carries the control-plane endpoints to Cilium pods.
//
// On a self-hosted shoot kube-apiserver is a hostNetwork static pod on every control-plane node, listening on port 443
// with a certificate valid for localhost, 127.0.0.1 and ::1 (gardener pkg/component/kubernetes/apiserver/secrets.go).
// A component on a control-plane node therefore uses https://localhost:443; any other uses the control-plane nodes'
// InternalIPs. The `kubernetes` ClusterIP (served by Cilium's kube-proxy replacement), the exposure VIP (announced by
// Cilium) and the external domain (resolving to that VIP) are never used.
package apiserverendpoints

import (
	"net/netip"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	v1beta1constants "github.com/gardener/gardener/pkg/apis/core/v1beta1/constants"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/cilium"
)

const (
	// Port is kube-apiserver's secure port on self-hosted shoots (gardener kubeapiserverconstants.Port).
	Port = 443
	// LocalHost is how a component on a control-plane node reaches the kube-apiserver of its own node.
	LocalHost = "localhost"

	// ConfigMapName is the ConfigMap in kube-system that this extension keeps current from the control-plane Nodes.
	// Cilium's pod templates reference it, so a pod created while the webhook is unreachable still avoids the VIP.
	ConfigMapName = "cilium-selfhosted-apiserver-endpoints"
	// KeyServiceHost holds the first control-plane InternalIP (not bracketed: client-go joins host and port itself).
	KeyServiceHost = cilium.EnvServiceHost
	// KeyAPIServerURLs holds all control-plane endpoints as a comma-separated list of https URLs, which Cilium's
	// config decoder splits (cilium/hive cell/config.go decoderConfig: StringToSliceHookFunc(",")).
	KeyAPIServerURLs = cilium.EnvAPIServerURLs

	// LabelManagedBy marks objects that this extension owns.
	LabelManagedBy = "app.kubernetes.io/managed-by"
	// ManagedByValue is this extension's name, as value of LabelManagedBy and as server-side-apply field owner.
	ManagedByValue = "gardener-extension-cilium-selfhosted"
)

// PortString is Port as an environment value.
var PortString = strconv.Itoa(Port)

// LocalURL is the one API server URL of a Cilium component on a control-plane node. Exactly one: with more than one
// URL a >= 1.18 agent moves its client to the `kubernetes` ClusterIP once it has synced
// (pkg/k8s/client/rest_config_provider.go: canRotateAPIServerURL is len(apiServerURLs) > 1, and only then
// registerMappingsUpdater switches to the service in updateMappings).
var LocalURL = URL(LocalHost)

// URL is the https URL of kube-apiserver on host (an IP, bracketed if IPv6, or a name).
func URL(host string) string {
	if addr, err := netip.ParseAddr(host); err == nil {
		return "https://" + netip.AddrPortFrom(addr, Port).String()
	}
	return "https://" + host + ":" + PortString
}

// IsControlPlaneNode tells whether a Node runs kube-apiserver: gardener-node-agent labels control-plane nodes with
// node-role.kubernetes.io/control-plane.
func IsControlPlaneNode(node *corev1.Node) bool {
	_, ok := node.Labels[v1beta1constants.LabelNodeRoleControlPlane]
	return ok
}

// ControlPlane are the kube-apiserver addresses of all control-plane nodes.
type ControlPlane struct {
	// Addresses are the nodes' InternalIPs, unique and sorted (IPv4 before IPv6), so that every agent sees the same
	// list and the first entry is stable.
	Addresses []netip.Addr
}

// FromNodes collects the InternalIPs of the control-plane nodes among nodes. Other address types are left out: a
// hostname or external name may resolve to the VIP.
func FromNodes(nodes []corev1.Node) ControlPlane {
	var addrs []netip.Addr
	for i := range nodes {
		if !IsControlPlaneNode(&nodes[i]) {
			continue
		}
		for _, a := range nodes[i].Status.Addresses {
			if a.Type != corev1.NodeInternalIP {
				continue
			}
			if addr, err := netip.ParseAddr(a.Address); err == nil {
				addrs = append(addrs, addr.Unmap())
			}
		}
	}
	slices.SortFunc(addrs, netip.Addr.Compare)
	return ControlPlane{Addresses: slices.Compact(addrs)}
}

// Empty tells whether no control-plane endpoint is known.
func (c ControlPlane) Empty() bool { return len(c.Addresses) == 0 }

// Host is the first control-plane address, for KUBERNETES_SERVICE_HOST.
func (c ControlPlane) Host() string {
	if c.Empty() {
		return ""
	}
	return c.Addresses[0].String()
}

// URLs are the https URLs of all control-plane nodes, for Cilium's start-up failover between them.
func (c ControlPlane) URLs() []string {
	urls := make([]string, 0, len(c.Addresses))
	for _, a := range c.Addresses {
		urls = append(urls, URL(a.String()))
	}
	return urls
}

// Data is the content of the endpoints ConfigMap.
func (c ControlPlane) Data() map[string]string {
	return map[string]string{
		KeyServiceHost:   c.Host(),
		KeyAPIServerURLs: strings.Join(c.URLs(), ","),
	}
}

// ConfigMap is the endpoints ConfigMap for server-side apply.
func ConfigMap(c ControlPlane) *corev1ac.ConfigMapApplyConfiguration {
	return corev1ac.ConfigMap(ConfigMapName, cilium.Namespace).
		WithLabels(map[string]string{LabelManagedBy: ManagedByValue}).
		WithData(c.Data())
}
