// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package exposure

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// ExposureConfig configures how kube-apiserver is exposed on a virtual IP by Cilium.
type ExposureConfig struct {
	metav1.TypeMeta

	// Announcement is how the VIP is made reachable: L2 (gratuitous ARP / NDP) or BGP.
	Announcement Announcement
	// Pool is the address pool of the VIP, a CiliumLoadBalancerIPPool of its own.
	Pool Pool
	// LoadBalancerIPs pin the VIP(s); each must lie in the pool.
	LoadBalancerIPs []string
	// L2 configures L2 announcements.
	L2 *L2
	// BGP configures announcements through Cilium's BGP control plane.
	BGP *BGP
}

// Announcement is how the VIP is announced.
type Announcement string

const (
	// AnnouncementL2 announces the VIP with gratuitous ARP (IPv4) or unsolicited neighbour advertisements (IPv6) from
	// the node that holds the lease.
	AnnouncementL2 Announcement = "L2"
	// AnnouncementBGP announces the VIP to BGP peers from the selected nodes.
	AnnouncementBGP Announcement = "BGP"
)

// Pool is a set of addresses for the VIP.
type Pool struct {
	// CIDRs are address blocks.
	CIDRs []string
	// Ranges are start-stop address ranges.
	Ranges []IPRange
}

// IPRange is an inclusive address range.
type IPRange struct {
	Start string
	Stop  string
}

// L2 configures L2 announcements.
type L2 struct {
	// Interfaces are regular expressions of the node interfaces to announce on; none means all of Cilium's devices.
	Interfaces []string
	// NodeSelector selects the nodes that may announce; nil means the control-plane nodes.
	NodeSelector *metav1.LabelSelector
	// LeaseDuration, LeaseRenewDeadline and LeaseRetryPeriod are the timings that Cilium's L2 announcer should use
	// (cilium-config l2-announcements-lease-duration, -renew-deadline, -retry-period).
	LeaseDuration      *metav1.Duration
	LeaseRenewDeadline *metav1.Duration
	LeaseRetryPeriod   *metav1.Duration
}

// BGP configures BGP announcements.
type BGP struct {
	// ClusterConfigName names an existing CiliumBGPClusterConfig to reuse: then only the advertisement is created,
	// labelled with AdvertisementLabels so that the user's CiliumBGPPeerConfig families select it.
	ClusterConfigName *string
	// AdvertisementLabels are extra labels of the CiliumBGPAdvertisement.
	AdvertisementLabels map[string]string
	// LocalASN is the ASN of the nodes.
	LocalASN *int64
	// Peers are the BGP neighbours.
	Peers []BGPPeer
	// NodeSelector selects the nodes that peer; nil means the control-plane nodes.
	NodeSelector *metav1.LabelSelector
	// Communities are attached to the VIP's route.
	Communities *BGPCommunities
}

// BGPPeer is a BGP neighbour.
type BGPPeer struct {
	Name    string
	Address string
	ASN     int64
	// Port is the peer's TCP port (179).
	Port *int32
	// HoldTimeSeconds, KeepAliveTimeSeconds and ConnectRetryTimeSeconds are the BGP timers.
	HoldTimeSeconds         *int32
	KeepAliveTimeSeconds    *int32
	ConnectRetryTimeSeconds *int32
	// GracefulRestart keeps routes through a restart of the agent.
	GracefulRestart *BGPGracefulRestart
	// EBGPMultihop is the TTL of eBGP sessions.
	EBGPMultihop *int32
	// AuthSecretRef names a Secret in Cilium's BGP secrets namespace with the TCP MD5 password (key `password`).
	AuthSecretRef *string
}

// BGPGracefulRestart configures BGP graceful restart.
type BGPGracefulRestart struct {
	Enabled            bool
	RestartTimeSeconds *int32
}

// BGPCommunities are BGP communities.
type BGPCommunities struct {
	Standard  []string
	WellKnown []string
	Large     []string
}
