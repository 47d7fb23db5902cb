// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

// Package validation validates the exposure configuration, with field paths that name the bad setting.
package validation

import (
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/tools/leaderelection"

	kubernetesutils "github.com/gardener/gardener/pkg/utils/kubernetes"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/addressing"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/apis/exposure"
)

// Environment is what the configuration is validated against.
type Environment struct {
	// Families are the shoot's IP families; the pool must offer an address of each.
	Families []addressing.Family
	// Networks are the shoot's node, pod and service networks (spec.networking).
	Networks []Network
	// NodeAddresses are the control-plane nodes' addresses (the exposure's spec.endpoints), when known.
	NodeAddresses []netip.Addr
	// OtherNodeAddresses are the other Nodes' addresses, when known. Only a pinned VIP is checked against them: a
	// worker that joins later with an address in an unpinned pool must not stop a running exposure, whose VIP LB-IPAM
	// has long assigned.
	OtherNodeAddresses []netip.Addr
	// Gateways are the gateways of the default routes of the extension's own node, when known: the node network's
	// router, which Kubernetes and the Shoot name nowhere.
	Gateways []netip.Addr
	// ReservedLabels are label keys the extension sets on its own objects.
	ReservedLabels []string
}

// Network is one of the shoot's networks.
type Network struct {
	// Path is the Shoot field it comes from, Prefix its CIDR.
	Path   *field.Path
	Prefix netip.Prefix
	// Nodes: the node network, where an L2-announced VIP must lie; the pod and service networks never hold one.
	Nodes bool
}

// specialRanges are address ranges that never hold a VIP: nothing outside the host answers for them, or everyone does.
var specialRanges = []struct {
	prefix netip.Prefix
	what   string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "the \"this network\" range 0.0.0.0/8"},
	{netip.MustParsePrefix("127.0.0.0/8"), "the loopback range 127.0.0.0/8"},
	{netip.MustParsePrefix("169.254.0.0/16"), "the link-local range 169.254.0.0/16"},
	{netip.MustParsePrefix("224.0.0.0/4"), "the multicast range 224.0.0.0/4"},
	{netip.MustParsePrefix("240.0.0.0/4"), "the reserved range 240.0.0.0/4 (with the broadcast address)"},
	{netip.MustParsePrefix("::/128"), "the unspecified address ::"},
	{netip.MustParsePrefix("::1/128"), "the loopback address ::1"},
	{netip.MustParsePrefix("::ffff:0:0/96"), "the IPv4-mapped range ::ffff:0:0/96, which names IPv4 addresses"},
	{netip.MustParsePrefix("64:ff9b::/96"), "the NAT64 range 64:ff9b::/96, which translators route to IPv4"},
	{netip.MustParsePrefix("64:ff9b:1::/48"), "the local-use NAT64 range 64:ff9b:1::/48, which translators route to IPv4"},
	{netip.MustParsePrefix("fe80::/10"), "the link-local range fe80::/10"},
	{netip.MustParsePrefix("ff00::/8"), "the multicast range ff00::/8"},
}

// ValidateExposureConfig validates cfg in env.
func ValidateExposureConfig(cfg *exposure.ExposureConfig, env Environment, fldPath *field.Path) field.ErrorList {
	allErrs := field.ErrorList{}

	switch cfg.Announcement {
	case exposure.AnnouncementL2:
		if cfg.L2 != nil {
			allErrs = append(allErrs, validateL2(cfg.L2, fldPath.Child("l2"))...)
		}
	case exposure.AnnouncementBGP:
		if cfg.BGP == nil {
			allErrs = append(allErrs, field.Required(fldPath.Child("bgp"), "announcement BGP needs a bgp section"))
		} else {
			allErrs = append(allErrs, validateBGP(cfg.BGP, env.ReservedLabels, fldPath.Child("bgp"))...)
		}
	default:
		allErrs = append(allErrs, field.NotSupported(fldPath.Child("announcement"), cfg.Announcement,
			[]exposure.Announcement{exposure.AnnouncementL2, exposure.AnnouncementBGP}))
	}

	pool, errs := ParsePool(cfg.Pool, fldPath.Child("pool"))
	allErrs = append(allErrs, errs...)
	if len(errs) > 0 {
		return allErrs
	}
	for _, f := range env.Families {
		if !pool.Has(f) {
			allErrs = append(allErrs, field.Invalid(fldPath.Child("pool"), cfg.Pool, fmt.Sprintf("the shoot has IP family %s, but the pool has no %s address", f, f)))
		}
	}
	allErrs = append(allErrs, validatePoolPlacement(cfg, pool, env, fldPath)...)
	if cfg.BGP != nil {
		for i, peer := range cfg.BGP.Peers {
			if addr, err := netip.ParseAddr(peer.Address); err == nil && pool.Contains(addr.Unmap()) {
				allErrs = append(allErrs, field.Invalid(fldPath.Child("bgp", "peers").Index(i).Child("address"), peer.Address,
					"is in the pool of VIPs: the peer would be told to route its own address to the nodes"))
			}
		}
	}

	seen := sets.New[addressing.Family]()
	for i, ip := range cfg.LoadBalancerIPs {
		p := fldPath.Child("loadBalancerIPs").Index(i)
		addr, err := netip.ParseAddr(ip)
		if err != nil {
			allErrs = append(allErrs, field.Invalid(p, ip, "not an IP address"))
			continue
		}
		if !pool.Contains(addr) {
			allErrs = append(allErrs, field.Invalid(p, ip, "not in the pool"))
		}
		if seen.Has(addressing.FamilyOf(addr)) {
			allErrs = append(allErrs, field.Duplicate(p, ip))
		}
		seen.Insert(addressing.FamilyOf(addr))
		if slices.Contains(env.NodeAddresses, addr) || slices.Contains(env.OtherNodeAddresses, addr) {
			allErrs = append(allErrs, field.Invalid(p, ip, "is a node's own address: the VIP must be an address no node has"))
		}
		if slices.Contains(env.Gateways, addr) {
			allErrs = append(allErrs, field.Invalid(p, ip, "is the gateway of the node network (the default route of the extension's node): "+
				"the VIP's announcer would take the router's address over"))
		}
		for _, n := range env.Networks {
			if n.Nodes && addr.Is4() && n.Prefix.Bits() < 31 && (addr == n.Prefix.Masked().Addr() || addr == lastAddr(n.Prefix)) {
				allErrs = append(allErrs, field.Invalid(p, ip, fmt.Sprintf("is the network or broadcast address of the node network %s (%s)", n.Prefix, n.Path)))
			}
		}
	}
	return allErrs
}

// validatePoolPlacement rejects pool blocks in special ranges or in the shoot's pod and service networks, and an
// unpinned pool that could hand out a node's address.
func validatePoolPlacement(cfg *exposure.ExposureConfig, pool addressing.Pool, env Environment, fldPath *field.Path) field.ErrorList {
	allErrs := field.ErrorList{}
	type block struct {
		path        *field.Path
		value       any
		first, last netip.Addr
	}
	var blocks []block
	for i, p := range pool.Prefixes {
		blocks = append(blocks, block{fldPath.Child("pool", "cidrs").Index(i), cfg.Pool.CIDRs[i], p.Masked().Addr(), lastAddr(p)})
	}
	for i, r := range pool.Ranges {
		blocks = append(blocks, block{fldPath.Child("pool", "ranges").Index(i), cfg.Pool.Ranges[i], r[0], r[1]})
	}
	overlaps := func(b block, p netip.Prefix) bool {
		return b.first.Is4() == p.Addr().Is4() && !lastAddr(p).Less(b.first) && !b.last.Less(p.Masked().Addr())
	}
	for _, b := range blocks {
		if (b.first == netip.IPv4Unspecified() && b.last == netip.MustParseAddr("255.255.255.255")) || (b.first == netip.IPv6Unspecified() && b.last.Next() == (netip.Addr{})) {
			allErrs = append(allErrs, field.Invalid(b.path, b.value, "covers every address: give the block of VIPs the exposure may use"))
			continue
		}
		for _, r := range specialRanges {
			if overlaps(b, r.prefix) {
				allErrs = append(allErrs, field.Invalid(b.path, b.value, "overlaps "+r.what+", which cannot hold a VIP"))
			}
		}
		for _, n := range env.Networks {
			if overlaps(b, n.Prefix) {
				if !n.Nodes {
					allErrs = append(allErrs, field.Invalid(b.path, b.value, fmt.Sprintf("overlaps the shoot's network %s (%s)", n.Prefix, n.Path)))
				} else if len(cfg.LoadBalancerIPs) == 0 {
					allErrs = append(allErrs, field.Invalid(b.path, b.value, fmt.Sprintf("overlaps the node network %s (%s): pin the VIP with loadBalancerIPs, "+
						"so that LB-IPAM never hands out an address a node has or will get", n.Prefix, n.Path)))
				}
			}
		}
		if len(cfg.LoadBalancerIPs) == 0 {
			holds := func(a netip.Addr) bool { return a.Is4() == b.first.Is4() && !a.Less(b.first) && !b.last.Less(a) }
			for _, a := range env.NodeAddresses {
				if holds(a) {
					allErrs = append(allErrs, field.Invalid(b.path, b.value, fmt.Sprintf("holds the control-plane node address %s, which LB-IPAM could hand out: "+
						"leave it out of the pool or pin the VIP with loadBalancerIPs", a)))
				}
			}
			for _, a := range env.Gateways {
				if holds(a) {
					allErrs = append(allErrs, field.Invalid(b.path, b.value, fmt.Sprintf("holds the node network's gateway %s, which LB-IPAM could hand out: "+
						"leave it out of the pool or pin the VIP with loadBalancerIPs", a)))
				}
			}
		}
	}
	return allErrs
}

// lastAddr is the last address of p.
func lastAddr(p netip.Prefix) netip.Addr {
	a := p.Masked().Addr().AsSlice()
	for i := p.Bits(); i < len(a)*8; i++ {
		a[i/8] |= 1 << (7 - i%8)
	}
	last, _ := netip.AddrFromSlice(a)
	return last
}

// validateNodeSelector checks a selector of the announcing nodes: well-formed, and requiring a label that no kubelet
// can set on its own Node (NodeRestriction, Gardener's kubernetesutils.IsNodeLabelAllowedForKubelet), such as
// node-role.kubernetes.io/control-plane, so that root on a worker cannot label it into the announcers.
func validateNodeSelector(sel *metav1.LabelSelector, fldPath *field.Path) field.ErrorList {
	allErrs := metav1validation.ValidateLabelSelector(sel, metav1validation.LabelSelectorValidationOptions{}, fldPath)
	for key := range sel.MatchLabels {
		if !kubernetesutils.IsNodeLabelAllowedForKubelet(key) {
			return allErrs
		}
	}
	for _, r := range sel.MatchExpressions {
		if (r.Operator == metav1.LabelSelectorOpIn || r.Operator == metav1.LabelSelectorOpExists) && !kubernetesutils.IsNodeLabelAllowedForKubelet(r.Key) {
			return allErrs
		}
	}
	return append(allErrs, field.Invalid(fldPath, metav1.FormatLabelSelector(sel), "must require a label no kubelet can set on its own Node "+
		"(matchLabels, In or Exists), such as node-role.kubernetes.io/control-plane or one under node-restriction.kubernetes.io/: "+
		"a worker could otherwise label itself into the announcing nodes"))
}

func validateL2(l2 *exposure.L2, fldPath *field.Path) field.ErrorList {
	allErrs := field.ErrorList{}
	for i, expr := range l2.Interfaces {
		if _, err := regexp.Compile(expr); err != nil {
			allErrs = append(allErrs, field.Invalid(fldPath.Child("interfaces").Index(i), expr, "not a regular expression: "+err.Error()))
		}
	}
	if l2.NodeSelector != nil {
		allErrs = append(allErrs, validateNodeSelector(l2.NodeSelector, fldPath.Child("nodeSelector"))...)
	}
	for _, t := range []struct {
		name  string
		value *metav1.Duration
		least time.Duration
	}{
		{"leaseDuration", l2.LeaseDuration, time.Second},
		{"leaseRenewDeadline", l2.LeaseRenewDeadline, minLeaseRetryPeriod},
		{"leaseRetryPeriod", l2.LeaseRetryPeriod, minLeaseRetryPeriod},
	} {
		switch {
		case t.value == nil:
		case t.value.Duration < t.least:
			allErrs = append(allErrs, field.Invalid(fldPath.Child(t.name), t.value.Duration.String(), fmt.Sprintf("must be at least %s: each agent retries its lease that often", t.least)))
		case t.value.Duration > maxLeaseTiming:
			allErrs = append(allErrs, field.Invalid(fldPath.Child(t.name), t.value.Duration.String(), fmt.Sprintf("must be at most %s: the VIP stays unannounced that long after its node dies", maxLeaseTiming)))
		}
	}
	// The lease records its duration in whole seconds (coordination/v1 leaseDurationSeconds), and the other agents
	// expire the holder by that value, not by the holder's own setting.
	if l2.LeaseDuration != nil && l2.LeaseDuration.Duration%time.Second != 0 {
		allErrs = append(allErrs, field.Invalid(fldPath.Child("leaseDuration"), l2.LeaseDuration.Duration.String(), "must be whole seconds: the lease records it as leaseDurationSeconds"))
	}
	// Cilium's L2 announcer elects with client-go's leader election, which refuses a renew deadline not longer than
	// the lease duration or than the jittered retry period (k8s.io/client-go/tools/leaderelection/leaderelection.go,
	// NewLeaderElector).
	if l2.LeaseDuration != nil && l2.LeaseRenewDeadline != nil && l2.LeaseRenewDeadline.Duration >= l2.LeaseDuration.Duration {
		allErrs = append(allErrs, field.Invalid(fldPath.Child("leaseRenewDeadline"), l2.LeaseRenewDeadline.Duration.String(), "must be shorter than leaseDuration"))
	}
	if l2.LeaseRenewDeadline != nil && l2.LeaseRetryPeriod != nil &&
		l2.LeaseRenewDeadline.Duration <= time.Duration(leaderelection.JitterFactor*float64(l2.LeaseRetryPeriod.Duration)) {
		allErrs = append(allErrs, field.Invalid(fldPath.Child("leaseRetryPeriod"), l2.LeaseRetryPeriod.Duration.String(),
			fmt.Sprintf("must be shorter than leaseRenewDeadline / %.1f: leader election retries with up to that jitter", leaderelection.JitterFactor)))
	}
	return allErrs
}

// minLeaseRetryPeriod and maxLeaseTiming bound the L2 lease timings: below, every agent hammers kube-apiserver with
// lease requests; above, the VIP fails over only after minutes.
const (
	minLeaseRetryPeriod = 100 * time.Millisecond
	maxLeaseTiming      = 5 * time.Minute
)

const maxASN = 4294967295

// reservedASNs are no AS's number: AS_TRANS stands for a 4-byte ASN towards old speakers (RFC 6793), the last 2-byte
// and 4-byte numbers are reserved (RFC 7300).
var reservedASNs = map[int64]string{23456: "AS_TRANS (RFC 6793)", 65535: "reserved (RFC 7300)", maxASN: "reserved (RFC 7300)"}

func validateBGP(bgp *exposure.BGP, reservedLabels []string, fldPath *field.Path) field.ErrorList {
	allErrs := field.ErrorList{}
	for k, v := range bgp.AdvertisementLabels {
		if slices.Contains(reservedLabels, k) {
			allErrs = append(allErrs, field.Invalid(fldPath.Child("advertisementLabels").Key(k), k,
				"is a label the extension sets to own the advertisement: overriding it would orphan the advertisement and leave the VIP unadvertised"))
		}
		for _, msg := range validation.IsQualifiedName(k) {
			allErrs = append(allErrs, field.Invalid(fldPath.Child("advertisementLabels").Key(k), k, msg))
		}
		for _, msg := range validation.IsValidLabelValue(v) {
			allErrs = append(allErrs, field.Invalid(fldPath.Child("advertisementLabels").Key(k), v, msg))
		}
	}
	if bgp.NodeSelector != nil {
		allErrs = append(allErrs, validateNodeSelector(bgp.NodeSelector, fldPath.Child("nodeSelector"))...)
	}
	if bgp.Communities != nil {
		allErrs = append(allErrs, validateCommunities(bgp.Communities, fldPath.Child("communities"))...)
	}

	if bgp.ClusterConfigName != nil {
		for _, msg := range validation.IsDNS1123Subdomain(*bgp.ClusterConfigName) {
			allErrs = append(allErrs, field.Invalid(fldPath.Child("clusterConfigName"), *bgp.ClusterConfigName, msg))
		}
		return allErrs
	}

	if bgp.LocalASN == nil {
		allErrs = append(allErrs, field.Required(fldPath.Child("localASN"), "BGP needs the nodes' ASN (or clusterConfigName)"))
	} else if *bgp.LocalASN < 1 || *bgp.LocalASN > maxASN {
		allErrs = append(allErrs, field.Invalid(fldPath.Child("localASN"), *bgp.LocalASN, "must be between 1 and 4294967295"))
	} else if what, ok := reservedASNs[int64(*bgp.LocalASN)]; ok {
		allErrs = append(allErrs, field.Invalid(fldPath.Child("localASN"), *bgp.LocalASN, "is "+what+", no AS's number"))
	}
	if len(bgp.Peers) == 0 {
		allErrs = append(allErrs, field.Required(fldPath.Child("peers"), "BGP needs at least one peer (or clusterConfigName)"))
	}
	names := sets.New[string]()
	for i, peer := range bgp.Peers {
		allErrs = append(allErrs, validatePeer(peer, fldPath.Child("peers").Index(i))...)
		if names.Has(peer.Name) {
			allErrs = append(allErrs, field.Duplicate(fldPath.Child("peers").Index(i).Child("name"), peer.Name))
		}
		names.Insert(peer.Name)
	}
	return allErrs
}

func validatePeer(peer exposure.BGPPeer, fldPath *field.Path) field.ErrorList {
	allErrs := field.ErrorList{}
	for _, msg := range validation.IsDNS1123Label(peer.Name) {
		allErrs = append(allErrs, field.Invalid(fldPath.Child("name"), peer.Name, msg))
	}
	if addr, err := netip.ParseAddr(peer.Address); err != nil {
		allErrs = append(allErrs, field.Invalid(fldPath.Child("address"), peer.Address, "not an IP address"))
	} else if addr = addr.Unmap(); addr.IsUnspecified() || addr.IsLoopback() || addr.IsMulticast() || addr == netip.AddrFrom4([4]byte{255, 255, 255, 255}) {
		allErrs = append(allErrs, field.Invalid(fldPath.Child("address"), peer.Address, "must be a router's unicast address, not an unspecified, loopback, multicast or broadcast one"))
	}
	// 0 lets Cilium take the peer's ASN from its OPEN message.
	if peer.ASN < 0 || peer.ASN > maxASN {
		allErrs = append(allErrs, field.Invalid(fldPath.Child("asn"), peer.ASN, "must be between 0 (learn from the peer) and 4294967295"))
	} else if what, ok := reservedASNs[peer.ASN]; ok {
		allErrs = append(allErrs, field.Invalid(fldPath.Child("asn"), peer.ASN, "is "+what+", no AS's number"))
	}
	inRange := func(name string, v *int32, lo, hi int32) {
		if v != nil && (*v < lo || *v > hi) {
			allErrs = append(allErrs, field.Invalid(fldPath.Child(name), *v, fmt.Sprintf("must be between %d and %d", lo, hi)))
		}
	}
	inRange("port", peer.Port, 1, 65535)
	inRange("holdTimeSeconds", peer.HoldTimeSeconds, 3, 65535)
	inRange("keepAliveTimeSeconds", peer.KeepAliveTimeSeconds, 1, 65535)
	inRange("connectRetryTimeSeconds", peer.ConnectRetryTimeSeconds, 1, 2147483647)
	inRange("ebgpMultihop", peer.EBGPMultihop, 1, 255)
	if peer.HoldTimeSeconds != nil && peer.KeepAliveTimeSeconds != nil && *peer.KeepAliveTimeSeconds > *peer.HoldTimeSeconds {
		allErrs = append(allErrs, field.Invalid(fldPath.Child("keepAliveTimeSeconds"), *peer.KeepAliveTimeSeconds, "must not exceed holdTimeSeconds"))
	}
	if peer.GracefulRestart != nil {
		inRange("gracefulRestart.restartTimeSeconds", peer.GracefulRestart.RestartTimeSeconds, 1, 4095)
	}
	if peer.AuthSecretRef != nil {
		for _, msg := range validation.IsDNS1123Subdomain(*peer.AuthSecretRef) {
			allErrs = append(allErrs, field.Invalid(fldPath.Child("authSecretRef"), *peer.AuthSecretRef, msg))
		}
	}
	return allErrs
}

var wellKnownCommunities = []string{
	"internet", "planned-shut", "accept-own", "route-filter-translated-v4", "route-filter-v4",
	"route-filter-translated-v6", "route-filter-v6", "llgr-stale", "no-llgr", "blackhole",
	"no-export", "no-advertise", "no-export-subconfed", "no-peer",
}

// validateCommunities refuses, beside malformed ones, RFC 1997's well-known communities and RFC 7999's blackhole
// (65535:*, Cilium's well-known names but internet) and the large communities of AS 65535: they tell routers to drop a
// route or stop its propagation, not the exposure's to ask; the chart's writes policy refuses them likewise.
func validateCommunities(c *exposure.BGPCommunities, fldPath *field.Path) field.ErrorList {
	allErrs := field.ErrorList{}
	const reserved = "is a well-known community (65535:*, RFC 1997 and RFC 7999's blackhole), which the exposure may not attach"
	for i, s := range c.Standard {
		p := fldPath.Child("standard").Index(i)
		switch {
		case !isCommunity(s, 2, 65535) && !isUint(s, maxASN):
			allErrs = append(allErrs, field.Invalid(p, s, "must be <0-65535>:<0-65535> or a 32-bit number"))
		case strings.HasPrefix(s, "65535:") || !strings.Contains(s, ":") && !isUint(s, 0xFFFEFFFF):
			allErrs = append(allErrs, field.Invalid(p, s, reserved))
		}
	}
	for i, s := range c.WellKnown {
		p := fldPath.Child("wellKnown").Index(i)
		switch {
		case !sets.New(wellKnownCommunities...).Has(s):
			allErrs = append(allErrs, field.NotSupported(p, s, wellKnownCommunities))
		case s != "internet":
			allErrs = append(allErrs, field.Invalid(p, s, reserved))
		}
	}
	for i, s := range c.Large {
		p := fldPath.Child("large").Index(i)
		switch {
		case !isCommunity(s, 3, maxASN):
			allErrs = append(allErrs, field.Invalid(p, s, "must be <0-4294967295>:<0-4294967295>:<0-4294967295>"))
		case strings.HasPrefix(s, "65535:"):
			allErrs = append(allErrs, field.Invalid(p, s, "is a large community of AS 65535, the well-known communities' (RFC 1997), which the exposure may not attach"))
		}
	}
	return allErrs
}

func isCommunity(s string, parts int, max uint64) bool {
	fields := strings.Split(s, ":")
	if len(fields) != parts {
		return false
	}
	for _, f := range fields {
		if !isUint(f, max) {
			return false
		}
	}
	return true
}

func isUint(s string, max uint64) bool {
	v, err := strconv.ParseUint(s, 10, 64)
	return err == nil && v <= max
}

// ParsePool parses and checks the CIDRs and ranges of a pool.
func ParsePool(p exposure.Pool, fldPath *field.Path) (addressing.Pool, field.ErrorList) {
	var (
		pool    addressing.Pool
		allErrs field.ErrorList
	)
	if len(p.CIDRs) == 0 && len(p.Ranges) == 0 {
		return pool, field.ErrorList{field.Required(fldPath, "the pool needs at least one CIDR or range")}
	}
	for i, c := range p.CIDRs {
		prefix, err := netip.ParsePrefix(c)
		if err != nil {
			allErrs = append(allErrs, field.Invalid(fldPath.Child("cidrs").Index(i), c, "not a CIDR"))
			continue
		}
		if prefix != prefix.Masked() {
			allErrs = append(allErrs, field.Invalid(fldPath.Child("cidrs").Index(i), c, fmt.Sprintf("host bits are set (did you mean %s?)", prefix.Masked())))
			continue
		}
		pool.Prefixes = append(pool.Prefixes, prefix)
	}
	for i, r := range p.Ranges {
		rp := fldPath.Child("ranges").Index(i)
		start, errStart := netip.ParseAddr(r.Start)
		stop, errStop := netip.ParseAddr(r.Stop)
		switch {
		case errStart != nil:
			allErrs = append(allErrs, field.Invalid(rp.Child("start"), r.Start, "not an IP address"))
		case errStop != nil:
			allErrs = append(allErrs, field.Invalid(rp.Child("stop"), r.Stop, "not an IP address"))
		case start.Is4() != stop.Is4():
			allErrs = append(allErrs, field.Invalid(rp, r, "start and stop are of different IP families"))
		case stop.Less(start):
			allErrs = append(allErrs, field.Invalid(rp, r, "stop is before start"))
		default:
			pool.Ranges = append(pool.Ranges, [2]netip.Addr{start, stop})
		}
	}
	return pool, allErrs
}
