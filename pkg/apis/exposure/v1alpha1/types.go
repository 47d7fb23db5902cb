// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// ExposureConfig configures how kube-apiserver is exposed on a virtual IP by Cilium. It is the providerConfig of a
// SelfHostedShootExposure of type cilium, or of the shoot's `controlPlane.exposure.extension`.
type ExposureConfig struct {
	metav1.TypeMeta `json:",inline"`

	// Announcement is how the VIP is made reachable: L2 (default; gratuitous ARP / NDP) or BGP.
	// +optional
	Announcement Announcement `json:"announcement,omitempty"`
	// Pool is the address pool of the VIP, a CiliumLoadBalancerIPPool of its own.
	Pool Pool `json:"pool"`
	// LoadBalancerIPs pin the VIP(s) (annotation lbipam.cilium.io/ips); each must lie in the pool.
	// +optional
	LoadBalancerIPs []string `json:"loadBalancerIPs,omitempty"`
	// L2 configures L2 announcements.
	// +optional
	L2 *L2 `json:"l2,omitempty"`
	// BGP configures announcements through Cilium's BGP control plane; required for announcement BGP.
	// +optional
	BGP *BGP `json:"bgp,omitempty"`
}

// Announcement is how the VIP is announced.
type Announcement string

const (
	// AnnouncementL2 announces the VIP with gratuitous ARP (IPv4) or unsolicited neighbour advertisements (IPv6).
	AnnouncementL2 Announcement = "L2"
	// AnnouncementBGP announces the VIP to BGP peers.
	AnnouncementBGP Announcement = "BGP"
)

// Pool is a set of addresses for the VIP.
type Pool struct {
	// CIDRs are address blocks, e.g. 203.0.113.10/32.
	// +optional
	CIDRs []string `json:"cidrs,omitempty"`
	// Ranges are inclusive start-stop address ranges.
	// +optional
	Ranges []IPRange `json:"ranges,omitempty"`
}

// IPRange is an inclusive address range.
type IPRange struct {
	Start string `json:"start"`
	Stop  string `json:"stop"`
}

// L2 configures L2 announcements.
type L2 struct {
	// Interfaces are regular expressions of the node interfaces to announce on; empty means all of Cilium's devices.
	// +optional
	Interfaces []string `json:"interfaces,omitempty"`
	// NodeSelector selects the nodes that may announce; default: the control-plane nodes.
	// +optional
	NodeSelector *metav1.LabelSelector `json:"nodeSelector,omitempty"`
	// LeaseDuration is the L2 lease duration Cilium should use (default 5s; Cilium's own default is 15s).
	// +optional
	LeaseDuration *metav1.Duration `json:"leaseDuration,omitempty"`
	// LeaseRenewDeadline is the L2 lease renew deadline (default 3s).
	// +optional
	LeaseRenewDeadline *metav1.Duration `json:"leaseRenewDeadline,omitempty"`
	// LeaseRetryPeriod is the L2 lease retry period (default 500ms).
	// +optional
	LeaseRetryPeriod *metav1.Duration `json:"leaseRetryPeriod,omitempty"`
}

// BGP configures BGP announcements.
type BGP struct {
	// ClusterConfigName names an existing CiliumBGPClusterConfig to reuse: then only the CiliumBGPAdvertisement is
	// created, with AdvertisementLabels, so that the families of the user's CiliumBGPPeerConfig select it.
	// +optional
	ClusterConfigName *string `json:"clusterConfigName,omitempty"`
	// AdvertisementLabels are extra labels of the CiliumBGPAdvertisement.
	// +optional
	AdvertisementLabels map[string]string `json:"advertisementLabels,omitempty"`
	// LocalASN is the ASN of the nodes; required unless ClusterConfigName is set.
	// +optional
	LocalASN *int64 `json:"localASN,omitempty"`
	// Peers are the BGP neighbours; required unless ClusterConfigName is set.
	// +optional
	Peers []BGPPeer `json:"peers,omitempty"`
	// NodeSelector selects the nodes that peer; default: the control-plane nodes.
	// +optional
	NodeSelector *metav1.LabelSelector `json:"nodeSelector,omitempty"`
	// Communities are attached to the VIP's route.
	// +optional
	Communities *BGPCommunities `json:"communities,omitempty"`
}

// BGPPeer is a BGP neighbour.
type BGPPeer struct {
	// Name identifies the peer.
	Name string `json:"name"`
	// Address is the peer's IP address.
	Address string `json:"address"`
	// ASN is the peer's ASN.
	ASN int64 `json:"asn"`
	// Port is the peer's TCP port (default 179).
	// +optional
	Port *int32 `json:"port,omitempty"`
	// HoldTimeSeconds is the BGP hold time: default 9, or three keepalive intervals when only those are set (Cilium's
	// own default is 90). 3 with a keepalive of 1 is the fastest Cilium allows (docs/bgp.md, "Timers").
	// +optional
	HoldTimeSeconds *int32 `json:"holdTimeSeconds,omitempty"`
	// KeepAliveTimeSeconds is the BGP keepalive interval: default a third of the hold time (Cilium's own is 30).
	// +optional
	KeepAliveTimeSeconds *int32 `json:"keepAliveTimeSeconds,omitempty"`
	// ConnectRetryTimeSeconds is the BGP connect retry interval: default 1 (Cilium's own is 120).
	// +optional
	ConnectRetryTimeSeconds *int32 `json:"connectRetryTimeSeconds,omitempty"`
	// GracefulRestart keeps routes through a restart of the agent.
	// +optional
	GracefulRestart *BGPGracefulRestart `json:"gracefulRestart,omitempty"`
	// EBGPMultihop is the TTL of eBGP sessions (default 1).
	// +optional
	EBGPMultihop *int32 `json:"ebgpMultihop,omitempty"`
	// AuthSecretRef names a Secret in Cilium's BGP secrets namespace holding the TCP MD5 password (key `password`).
	// +optional
	AuthSecretRef *string `json:"authSecretRef,omitempty"`
}

// BGPGracefulRestart configures BGP graceful restart.
type BGPGracefulRestart struct {
	// Enabled switches graceful restart on.
	Enabled bool `json:"enabled"`
	// RestartTimeSeconds is the restart time advertised to the peer (default 120).
	// +optional
	RestartTimeSeconds *int32 `json:"restartTimeSeconds,omitempty"`
}

// BGPCommunities are BGP communities of the VIP's route.
type BGPCommunities struct {
	// Standard communities, e.g. 64512:100.
	// +optional
	Standard []string `json:"standard,omitempty"`
	// WellKnown communities, e.g. no-export.
	// +optional
	WellKnown []string `json:"wellKnown,omitempty"`
	// Large communities, e.g. 64512:1:1.
	// +optional
	Large []string `json:"large,omitempty"`
}
