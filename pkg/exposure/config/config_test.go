// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package config

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"

	gardencorev1beta1 "github.com/gardener/gardener/pkg/apis/core/v1beta1"
	extensionsv1alpha1 "github.com/gardener/gardener/pkg/apis/extensions/v1alpha1"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/apis/exposure"
)

const header = `{"apiVersion":"cilium-selfhosted.extensions.gardener.cloud/v1alpha1","kind":"ExposureConfig",`

func shoot(families []gardencorev1beta1.IPFamily, providerConfig string) *gardencorev1beta1.Shoot {
	s := &gardencorev1beta1.Shoot{Spec: gardencorev1beta1.ShootSpec{
		Networking: &gardencorev1beta1.Networking{IPFamilies: families},
		Provider: gardencorev1beta1.Provider{Workers: []gardencorev1beta1.Worker{
			{Name: "worker"},
			{Name: "control-plane", ControlPlane: &gardencorev1beta1.WorkerControlPlane{Exposure: &gardencorev1beta1.Exposure{
				Extension: &gardencorev1beta1.ExtensionExposure{Type: new("cilium")},
			}}},
		}},
	}}
	if providerConfig != "" {
		s.Spec.Provider.Workers[1].ControlPlane.Exposure.Extension.ProviderConfig = &runtime.RawExtension{Raw: []byte(providerConfig)}
	}
	return s
}

func exposureWith(providerConfig string) *extensionsv1alpha1.SelfHostedShootExposure {
	e := &extensionsv1alpha1.SelfHostedShootExposure{}
	if providerConfig != "" {
		e.Spec.ProviderConfig = &runtime.RawExtension{Raw: []byte(providerConfig)}
	}
	return e
}

var ipv4 = []gardencorev1beta1.IPFamily{gardencorev1beta1.IPFamilyIPv4}

func TestLoadDefaults(t *testing.T) {
	loaded, err := Load(exposureWith(""), shoot(ipv4, header+`"pool":{"cidrs":["203.0.113.10/32"]}}`), Site{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := loaded.Config
	if cfg.Announcement != exposure.AnnouncementL2 || cfg.L2 == nil {
		t.Fatalf("announcement %q l2 %v, want L2 by default", cfg.Announcement, cfg.L2)
	}
	if cfg.L2.LeaseDuration.Duration != 5*time.Second || cfg.L2.LeaseRenewDeadline.Duration != 3*time.Second || cfg.L2.LeaseRetryPeriod.Duration != 500*time.Millisecond {
		t.Errorf("lease defaults %v %v %v", cfg.L2.LeaseDuration, cfg.L2.LeaseRenewDeadline, cfg.L2.LeaseRetryPeriod)
	}
}

func TestLoadBGPTimerDefaults(t *testing.T) {
	for name, tc := range map[string]struct {
		timers                        string
		hold, keepalive, connectRetry int32
	}{
		"none":                {``, 9, 3, 1},
		"fast profile":        {`,"holdTimeSeconds":3,"keepAliveTimeSeconds":1`, 3, 1, 1},
		"hold only":           {`,"holdTimeSeconds":3`, 3, 1, 1},
		"long hold only":      {`,"holdTimeSeconds":90`, 90, 30, 1},
		"keepalive only":      {`,"keepAliveTimeSeconds":10`, 30, 10, 1},
		"connect retry given": {`,"connectRetryTimeSeconds":120`, 9, 3, 120},
	} {
		t.Run(name, func(t *testing.T) {
			loaded, err := Load(exposureWith(""), shoot(ipv4, header+`"announcement":"BGP","pool":{"cidrs":["203.0.113.0/28"]},`+
				`"bgp":{"localASN":64512,"peers":[{"name":"tor-a","address":"10.0.0.1","asn":64500`+tc.timers+`}]}}`), Site{})
			if err != nil {
				t.Fatal(err)
			}
			p := loaded.Config.BGP.Peers[0]
			if got := [3]int32{*p.HoldTimeSeconds, *p.KeepAliveTimeSeconds, *p.ConnectRetryTimeSeconds}; got != [3]int32{tc.hold, tc.keepalive, tc.connectRetry} {
				t.Errorf("hold, keepalive, connect retry %v, want %v", got, [3]int32{tc.hold, tc.keepalive, tc.connectRetry})
			}
		})
	}
}

func TestLoadPrefersTheExposuresProviderConfig(t *testing.T) {
	loaded, err := Load(exposureWith(header+`"announcement":"BGP","pool":{"cidrs":["203.0.113.0/28"]},"bgp":{"clusterConfigName":"dc"}}`),
		shoot(ipv4, header+`"pool":{"cidrs":["198.51.100.0/28"]}}`), Site{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := loaded.Config
	if cfg.Announcement != exposure.AnnouncementBGP || cfg.Pool.CIDRs[0] != "203.0.113.0/28" {
		t.Errorf("loaded %+v, want the exposure's own providerConfig", cfg)
	}
}

func TestLoadErrorsNameTheField(t *testing.T) {
	bgpPeer := `{"name":"tor","address":"10.0.0.1","asn":64500}`
	for name, tc := range map[string]struct {
		exposureConfig, shootConfig string
		families                    []gardencorev1beta1.IPFamily
		want                        string
	}{
		"none":                      {"", "", ipv4, "shoot.spec.provider.workers[1].controlPlane.exposure.extension.providerConfig: Required"},
		"unknown field":             {header + `"pool":{"cidrs":["203.0.113.10/32"]},"pools":[]}`, "", ipv4, `spec.providerConfig: decoding providerConfig: strict decoding error: unknown field "pools"`},
		"no kind":                   {`{"pool":{"cidrs":["203.0.113.10/32"]}}`, "", ipv4, "spec.providerConfig: decoding providerConfig"},
		"malformed":                 {header + `"pool":`, "", ipv4, "spec.providerConfig: decoding providerConfig"},
		"unknown announcement":      {header + `"announcement":"ARP","pool":{"cidrs":["203.0.113.10/32"]}}`, "", ipv4, `spec.providerConfig.announcement: Unsupported value: "ARP"`},
		"empty pool":                {header + `"pool":{}}`, "", ipv4, "spec.providerConfig.pool: Required"},
		"invalid CIDR":              {header + `"pool":{"cidrs":["203.0.113.300/32"]}}`, "", ipv4, "spec.providerConfig.pool.cidrs[0]: Invalid value"},
		"host bits":                 {header + `"pool":{"cidrs":["203.0.113.1/24"]}}`, "", ipv4, "did you mean 203.0.113.0/24"},
		"range backwards":           {header + `"pool":{"ranges":[{"start":"203.0.113.20","stop":"203.0.113.10"}]}}`, "", ipv4, "spec.providerConfig.pool.ranges[0]"},
		"range mixed":               {header + `"pool":{"ranges":[{"start":"203.0.113.20","stop":"2001:db8::1"}]}}`, "", ipv4, "different IP families"},
		"pinned outside pool":       {header + `"pool":{"cidrs":["203.0.113.0/28"]},"loadBalancerIPs":["203.0.113.100"]}`, "", ipv4, "spec.providerConfig.loadBalancerIPs[0]: Invalid value: \"203.0.113.100\": not in the pool"},
		"pinned twice":              {header + `"pool":{"cidrs":["203.0.113.0/28"]},"loadBalancerIPs":["203.0.113.1","203.0.113.2"]}`, "", ipv4, "spec.providerConfig.loadBalancerIPs[1]: Duplicate"},
		"no IPv6 in pool":           {header + `"pool":{"cidrs":["203.0.113.0/28"]}}`, "", []gardencorev1beta1.IPFamily{"IPv4", "IPv6"}, "the pool has no IPv6 address"},
		"BGP without section":       {header + `"announcement":"BGP","pool":{"cidrs":["203.0.113.0/28"]}}`, "", ipv4, "spec.providerConfig.bgp: Required"},
		"BGP without ASN":           {header + `"announcement":"BGP","pool":{"cidrs":["203.0.113.0/28"]},"bgp":{"peers":[` + bgpPeer + `]}}`, "", ipv4, "spec.providerConfig.bgp.localASN: Required"},
		"BGP without peers":         {header + `"announcement":"BGP","pool":{"cidrs":["203.0.113.0/28"]},"bgp":{"localASN":64512}}`, "", ipv4, "spec.providerConfig.bgp.peers: Required"},
		"BGP bad peer":              {header + `"announcement":"BGP","pool":{"cidrs":["203.0.113.0/28"]},"bgp":{"localASN":64512,"peers":[{"name":"Tor","address":"x","asn":-1,"holdTimeSeconds":2}]}}`, "", ipv4, "spec.providerConfig.bgp.peers[0].address"},
		"BGP bad community":         {header + `"announcement":"BGP","pool":{"cidrs":["203.0.113.0/28"]},"bgp":{"clusterConfigName":"dc","communities":{"standard":["70000:1"]}}}`, "", ipv4, "spec.providerConfig.bgp.communities.standard[0]"},
		"BGP blackhole":             {header + `"announcement":"BGP","pool":{"cidrs":["203.0.113.0/28"]},"bgp":{"clusterConfigName":"dc","communities":{"standard":["64512:1","65535:666"]}}}`, "", ipv4, "spec.providerConfig.bgp.communities.standard[1]: Invalid value: \"65535:666\": is a well-known community"},
		"BGP blackhole as a number": {header + `"announcement":"BGP","pool":{"cidrs":["203.0.113.0/28"]},"bgp":{"clusterConfigName":"dc","communities":{"standard":["4294902426"]}}}`, "", ipv4, "spec.providerConfig.bgp.communities.standard[0]: Invalid value: \"4294902426\": is a well-known community"},
		"BGP no-export":             {header + `"announcement":"BGP","pool":{"cidrs":["203.0.113.0/28"]},"bgp":{"clusterConfigName":"dc","communities":{"wellKnown":["internet","no-export"]}}}`, "", ipv4, "spec.providerConfig.bgp.communities.wellKnown[1]: Invalid value: \"no-export\": is a well-known community"},
		"BGP large of AS 65535":     {header + `"announcement":"BGP","pool":{"cidrs":["203.0.113.0/28"]},"bgp":{"clusterConfigName":"dc","communities":{"large":["64512:1:1","65535:0:666"]}}}`, "", ipv4, "spec.providerConfig.bgp.communities.large[1]: Invalid value: \"65535:0:666\": is a large community of AS 65535"},
		"L2 bad regex":              {header + `"pool":{"cidrs":["203.0.113.0/28"]},"l2":{"interfaces":["eth("]}}`, "", ipv4, "spec.providerConfig.l2.interfaces[0]"},
		"L2 nodes a kubelet labels": {header + `"pool":{"cidrs":["203.0.113.0/28"]},"l2":{"nodeSelector":{"matchLabels":{"worker.gardener.cloud/pool":"cp"}}}}`, "", ipv4,
			"spec.providerConfig.l2.nodeSelector: Invalid value: \"worker.gardener.cloud/pool=cp\": must require a label no kubelet can set"},
		"BGP nodes by hostname": {header + `"announcement":"BGP","pool":{"cidrs":["203.0.113.0/28"]},"bgp":{"clusterConfigName":"dc","nodeSelector":{"matchExpressions":[{"key":"kubernetes.io/hostname","operator":"In","values":["cp-0"]},{"key":"node-role.kubernetes.io/control-plane","operator":"DoesNotExist"}]}}}`, "", ipv4,
			"spec.providerConfig.bgp.nodeSelector: Invalid value"},
		"L2 lease order":          {header + `"pool":{"cidrs":["203.0.113.0/28"]},"l2":{"leaseDuration":"2s","leaseRenewDeadline":"3s"}}`, "", ipv4, "spec.providerConfig.l2.leaseRenewDeadline"},
		"from the shoot":          {"", header + `"pool":{"cidrs":["bad"]}}`, ipv4, "shoot.spec.provider.workers[1].controlPlane.exposure.extension.providerConfig.pool.cidrs[0]"},
		"L2 lease of nanoseconds": {header + `"pool":{"cidrs":["203.0.113.0/28"]},"l2":{"leaseDuration":"3ns","leaseRenewDeadline":"2ns","leaseRetryPeriod":"1ns"}}`, "", ipv4, "spec.providerConfig.l2.leaseRetryPeriod: Invalid value: \"1ns\": must be at least 100ms"},
		"L2 lease of fractions":   {header + `"pool":{"cidrs":["203.0.113.0/28"]},"l2":{"leaseDuration":"4500ms"}}`, "", ipv4, "spec.providerConfig.l2.leaseDuration: Invalid value: \"4.5s\": must be whole seconds"},
		"L2 lease of years":       {header + `"pool":{"cidrs":["203.0.113.0/28"]},"l2":{"leaseDuration":"100000h"}}`, "", ipv4, "spec.providerConfig.l2.leaseDuration: Invalid value: \"100000h0m0s\": must be at most 5m0s"},
		"L2 lease jitter":         {header + `"pool":{"cidrs":["203.0.113.0/28"]},"l2":{"leaseDuration":"5s","leaseRenewDeadline":"2s","leaseRetryPeriod":"1700ms"}}`, "", ipv4, "spec.providerConfig.l2.leaseRetryPeriod: Invalid value: \"1.7s\": must be shorter than leaseRenewDeadline / 1.2"},
		"IPv4-mapped pool":        {header + `"pool":{"cidrs":["::ffff:203.0.113.0/124"]}}`, "", []gardencorev1beta1.IPFamily{"IPv6"}, "overlaps the IPv4-mapped range"},
		"NAT64 pool":              {header + `"pool":{"cidrs":["64:ff9b::cb00:7100/120"]}}`, "", []gardencorev1beta1.IPFamily{"IPv6"}, "overlaps the NAT64 range"},
		"BGP peer unspecified":    {header + `"announcement":"BGP","pool":{"cidrs":["203.0.113.0/28"]},"bgp":{"localASN":64512,"peers":[{"name":"tor","address":"0.0.0.0","asn":64500}]}}`, "", ipv4, "spec.providerConfig.bgp.peers[0].address: Invalid value: \"0.0.0.0\": must be a router's unicast address"},
		"BGP peer loopback":       {header + `"announcement":"BGP","pool":{"cidrs":["203.0.113.0/28"]},"bgp":{"localASN":64512,"peers":[{"name":"tor","address":"127.0.0.1","asn":64500}]}}`, "", ipv4, "spec.providerConfig.bgp.peers[0].address: Invalid value: \"127.0.0.1\""},
		"BGP peer multicast":      {header + `"announcement":"BGP","pool":{"cidrs":["203.0.113.0/28"]},"bgp":{"localASN":64512,"peers":[{"name":"tor","address":"224.0.0.5","asn":64500}]}}`, "", ipv4, "spec.providerConfig.bgp.peers[0].address: Invalid value: \"224.0.0.5\""},
		"BGP peer is the VIP":     {header + `"announcement":"BGP","pool":{"cidrs":["203.0.113.0/28"]},"loadBalancerIPs":["203.0.113.1"],"bgp":{"localASN":64512,"peers":[{"name":"tor","address":"203.0.113.1","asn":64500}]}}`, "", ipv4, "spec.providerConfig.bgp.peers[0].address: Invalid value: \"203.0.113.1\": is in the pool of VIPs"},
		"BGP AS_TRANS":            {header + `"announcement":"BGP","pool":{"cidrs":["203.0.113.0/28"]},"bgp":{"localASN":23456,"peers":[` + bgpPeer + `]}}`, "", ipv4, "spec.providerConfig.bgp.localASN: Invalid value: 23456: is AS_TRANS"},
		"BGP reserved peer ASN":   {header + `"announcement":"BGP","pool":{"cidrs":["203.0.113.0/28"]},"bgp":{"localASN":64512,"peers":[{"name":"tor","address":"10.0.0.1","asn":4294967295}]}}`, "", ipv4, "spec.providerConfig.bgp.peers[0].asn: Invalid value: 4294967295: is reserved"},
	} {
		_, err := Load(exposureWith(tc.exposureConfig), shoot(tc.families, tc.shootConfig), Site{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v\n  want one containing %q", name, err, tc.want)
		}
	}
}

func TestFamilies(t *testing.T) {
	if f := Families(&gardencorev1beta1.Shoot{}); len(f) != 1 || f[0] != "IPv4" {
		t.Errorf("a shoot without networking is IPv4, got %v", f)
	}
	if f := Families(shoot([]gardencorev1beta1.IPFamily{"IPv6", "IPv4"}, "")); len(f) != 2 || f[0] != "IPv6" {
		t.Errorf("the shoot's order is kept, got %v", f)
	}
}

// TestNodeSelectorsByTheControlPlaneLabel: node selectors that require the control-plane label, which no kubelet can
// set, load, whatever else they require (docs/bgp.md's drain label).
func TestNodeSelectorsByTheControlPlaneLabel(t *testing.T) {
	drain := `{"matchExpressions":[{"key":"node-role.kubernetes.io/control-plane","operator":"Exists"},{"key":"example.com/bgp-drain","operator":"DoesNotExist"}]}`
	for name, cfg := range map[string]string{
		"L2":  header + `"pool":{"cidrs":["203.0.113.0/28"]},"l2":{"nodeSelector":{"matchLabels":{"node-role.kubernetes.io/control-plane":"","kubernetes.io/hostname":"cp-0"}}}}`,
		"BGP": header + `"announcement":"BGP","pool":{"cidrs":["203.0.113.0/28"]},"bgp":{"clusterConfigName":"dc","nodeSelector":` + drain + `}}`,
	} {
		if _, err := Load(exposureWith(cfg), shoot(ipv4, ""), Site{}); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}
