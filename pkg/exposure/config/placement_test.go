// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package config

import (
	"maps"
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	gardencorev1beta1 "github.com/gardener/gardener/pkg/apis/core/v1beta1"
	extensionsv1alpha1 "github.com/gardener/gardener/pkg/apis/extensions/v1alpha1"
)

// shootWithNetworks is a dual-stack shoot with node, pod and service networks, as gardenadm's Shoot has them.
func shootWithNetworks(providerConfig string) *gardencorev1beta1.Shoot {
	s := shoot([]gardencorev1beta1.IPFamily{"IPv4"}, providerConfig)
	s.Spec.Networking.Nodes, s.Spec.Networking.Pods, s.Spec.Networking.Services = new("10.0.0.0/16"), new("100.64.0.0/12"), new("100.104.0.0/13")
	return s
}

// exposureOnNodes is an exposure whose control-plane endpoints are 10.0.1.10 and 10.0.1.11.
func exposureOnNodes() *extensionsv1alpha1.SelfHostedShootExposure {
	e := &extensionsv1alpha1.SelfHostedShootExposure{}
	for i, ip := range []string{"10.0.1.10", "10.0.1.11"} {
		e.Spec.Endpoints = append(e.Spec.Endpoints, extensionsv1alpha1.ControlPlaneEndpoint{
			NodeName: "cp-" + string(rune('0'+i)), Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}},
		})
	}
	return e
}

func TestLoadRejectsPoolsThatCannotHoldTheVIP(t *testing.T) {
	// The site as the actuator sees it: a worker at 10.0.2.20 and the node network's router at 10.0.0.1.
	site := Site{NodeAddresses: []netip.Addr{netip.MustParseAddr("10.0.2.20")}, Gateways: []netip.Addr{netip.MustParseAddr("10.0.0.1")}}
	for name, tc := range map[string]struct {
		config string
		want   string
	}{
		"every address":             {`"pool":{"cidrs":["0.0.0.0/0"]}`, `pool.cidrs[0]: Invalid value: "0.0.0.0/0": covers every address`},
		"every IPv6 address":        {`"pool":{"cidrs":["203.0.113.0/28","::/0"]}`, `pool.cidrs[1]: Invalid value: "::/0": covers every address`},
		"loopback":                  {`"pool":{"cidrs":["127.0.0.10/32"]}`, `pool.cidrs[0]: Invalid value: "127.0.0.10/32": overlaps the loopback range 127.0.0.0/8`},
		"IPv6 loopback":             {`"pool":{"cidrs":["203.0.113.0/28","::1/128"]}`, "overlaps the loopback address ::1"},
		"multicast":                 {`"pool":{"cidrs":["239.1.1.0/24"]}`, "overlaps the multicast range 224.0.0.0/4"},
		"IPv6 multicast":            {`"pool":{"cidrs":["203.0.113.0/28","ff02::/64"]}`, "overlaps the multicast range ff00::/8"},
		"link-local":                {`"pool":{"cidrs":["169.254.10.0/24"]}`, "overlaps the link-local range 169.254.0.0/16"},
		"IPv6 link-local":           {`"pool":{"cidrs":["203.0.113.0/28","fe80::/64"]}`, "overlaps the link-local range fe80::/10"},
		"this network":              {`"pool":{"cidrs":["0.0.0.0/32"]}`, `overlaps the "this network" range 0.0.0.0/8`},
		"broadcast":                 {`"pool":{"ranges":[{"start":"255.255.255.250","stop":"255.255.255.255"}]}`, "pool.ranges[0]"},
		"range in loopback":         {`"pool":{"ranges":[{"start":"126.255.255.250","stop":"127.0.0.1"}]}`, "pool.ranges[0]: Invalid value"},
		"pod network":               {`"pool":{"cidrs":["100.64.10.0/28"]}`, "overlaps the shoot's network 100.64.0.0/12 (shoot.spec.networking.pods)"},
		"service network":           {`"pool":{"ranges":[{"start":"100.103.255.250","stop":"100.104.0.5"}]}`, "overlaps the shoot's network 100.104.0.0/13 (shoot.spec.networking.services)"},
		"node network, unpinned":    {`"pool":{"cidrs":["10.0.200.0/28"]}`, "overlaps the node network 10.0.0.0/16 (shoot.spec.networking.nodes): pin the VIP with loadBalancerIPs"},
		"a node's address pinned":   {`"pool":{"cidrs":["10.0.1.0/28"]},"loadBalancerIPs":["10.0.1.11"]`, `loadBalancerIPs[0]: Invalid value: "10.0.1.11": is a node's own address`},
		"a worker's address pinned": {`"pool":{"cidrs":["10.0.2.16/28"]},"loadBalancerIPs":["10.0.2.20"]`, `loadBalancerIPs[0]: Invalid value: "10.0.2.20": is a node's own address`},
		"the gateway pinned": {`"pool":{"cidrs":["10.0.0.0/28"]},"loadBalancerIPs":["10.0.0.1"]`,
			`loadBalancerIPs[0]: Invalid value: "10.0.0.1": is the gateway of the node network`},
		"a pool holding the gateway":          {`"pool":{"ranges":[{"start":"10.0.0.1","stop":"10.0.0.1"}]}`, "holds the node network's gateway 10.0.0.1"},
		"a pool holding a control-plane node": {`"pool":{"cidrs":["10.0.1.11/32"]}`, "holds the control-plane node address 10.0.1.11"},
		"node network's broadcast": {`"pool":{"cidrs":["10.0.255.255/32"]},"loadBalancerIPs":["10.0.255.255"]`,
			"is the network or broadcast address of the node network 10.0.0.0/16"},
		"node network's address": {`"pool":{"cidrs":["10.0.0.0/30"]},"loadBalancerIPs":["10.0.0.0"]`, "is the network or broadcast address"},
		"advertisement takes the owner's label": {`"announcement":"BGP","pool":{"cidrs":["203.0.113.0/28"]},"bgp":{"clusterConfigName":"dc",` +
			`"advertisementLabels":{"selfhostedshootexposure.extensions.gardener.cloud/name":"x"}}`,
			`bgp.advertisementLabels[selfhostedshootexposure.extensions.gardener.cloud/name]: Invalid value: "selfhostedshootexposure.extensions.gardener.cloud/name": is a label the extension sets`},
		"advertisement takes managed-by": {`"announcement":"BGP","pool":{"cidrs":["203.0.113.0/28"]},"bgp":{"clusterConfigName":"dc",` +
			`"advertisementLabels":{"app.kubernetes.io/managed-by":"me"}}`, "orphan the advertisement"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Load(exposureOnNodes(), shootWithNetworks(header+tc.config+"}"), site)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v\n  want one containing %q", err, tc.want)
			}
		})
	}
}

func TestLoadAcceptsVIPsOnTheNodeSegment(t *testing.T) {
	for name, config := range map[string]string{
		"pinned in the node network":              `"pool":{"cidrs":["10.0.0.0/24"]},"loadBalancerIPs":["10.0.0.100"]`,
		"range beside the nodes":                  `"pool":{"ranges":[{"start":"10.0.200.1","stop":"10.0.200.9"}]},"loadBalancerIPs":["10.0.200.5"]`,
		"outside every network":                   `"pool":{"cidrs":["203.0.113.0/28"]}`,
		"first address of the pool's own block":   `"pool":{"cidrs":["203.0.113.0/28"]},"loadBalancerIPs":["203.0.113.0"]`,
		"owner labels untouched by advertisement": `"announcement":"BGP","pool":{"cidrs":["203.0.113.0/28"]},"bgp":{"clusterConfigName":"dc","advertisementLabels":{"tier":"apiserver"}}`,
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := Load(exposureOnNodes(), shootWithNetworks(header+config+"}"), Site{}); err != nil {
				t.Error(err)
			}
		})
	}
}

func TestCheckPrerequisites(t *testing.T) {
	l2 := header + `"pool":{"cidrs":["203.0.113.0/28"]}}`
	bgp := header + `"announcement":"BGP","pool":{"cidrs":["203.0.113.0/28"]},"bgp":{"clusterConfigName":"dc"}}`
	ready := func(exposureConfig, networkConfig string) *gardencorev1beta1.Shoot {
		s := shootWithNetworks(exposureConfig)
		s.Spec.Networking.Type = new("cilium")
		s.Spec.Networking.ProviderConfig = &runtime.RawExtension{Raw: []byte(networkConfig)}
		s.Spec.Kubernetes.KubeProxy = &gardencorev1beta1.KubeProxyConfig{Enabled: new(false)}
		return s
	}
	const (
		l2On  = `{"apiVersion":"cilium.networking.extensions.gardener.cloud/v1alpha1","kind":"NetworkConfig","l2Announcements":{"enabled":true}}`
		bgpOn = `{"apiVersion":"cilium.networking.extensions.gardener.cloud/v1alpha1","kind":"NetworkConfig","bgpControlPlane":{"enabled":true}}`
	)
	for name, tc := range map[string]struct {
		shoot *gardencorev1beta1.Shoot
		want  string // "" for no error
	}{
		"L2 ready":  {ready(l2, l2On), ""},
		"BGP ready": {ready(bgp, bgpOn), ""},
		"L2 without the announcer": {ready(l2, bgpOn),
			"shoot.spec.networking.providerConfig.l2Announcements.enabled: Invalid value: false: announcement L2 needs Cilium's L2 announcer: set it to true"},
		"BGP without the control plane": {ready(bgp, l2On),
			"shoot.spec.networking.providerConfig.bgpControlPlane.enabled: Invalid value: false: announcement BGP needs Cilium's BGP control plane: set it to true"},
		"no NetworkConfig": {func() *gardencorev1beta1.Shoot {
			s := ready(l2, l2On)
			s.Spec.Networking.ProviderConfig = nil
			return s
		}(),
			"l2Announcements.enabled: Invalid value: false"},
		"other networking": {func() *gardencorev1beta1.Shoot {
			s := ready(l2, l2On)
			s.Spec.Networking.Type = new("calico")
			return s
		}(),
			`shoot.spec.networking.type: Invalid value: "calico": the cilium exposure announces the VIP with Gardener's networking-cilium: set it to cilium`},
		"kube-proxy by default": {func() *gardencorev1beta1.Shoot { s := ready(l2, l2On); s.Spec.Kubernetes.KubeProxy = nil; return s }(),
			"shoot.spec.kubernetes.kubeProxy.enabled: Invalid value: true: the exposure needs Cilium's kube-proxy replacement"},
		"kube-proxy on": {func() *gardencorev1beta1.Shoot {
			s := ready(bgp, bgpOn)
			s.Spec.Kubernetes.KubeProxy.Enabled = new(true)
			return s
		}(), "set it to false"},
	} {
		t.Run(name, func(t *testing.T) {
			loaded, err := Load(nil, tc.shoot, Site{})
			if err != nil {
				t.Fatal(err)
			}
			cfg := loaded.Config
			err = CheckPrerequisites(tc.shoot, cfg)
			if tc.want == "" && err != nil {
				t.Errorf("unexpected error %v", err)
			}
			if tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("error %v\n  want one containing %q", err, tc.want)
			}
		})
	}
}

func TestL2LeaseTimingsLeaveTheNetworkConfigsOwn(t *testing.T) {
	s := shootWithNetworks(header + `"pool":{"cidrs":["203.0.113.0/28"]}}`)
	loaded, err := Load(nil, s, Site{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := loaded.Config
	all := map[string]string{"l2-announcements-lease-duration": "5s", "l2-announcements-renew-deadline": "3s", "l2-announcements-retry-period": "500ms"}
	if got := L2LeaseTimings(s, cfg); !maps.Equal(got, all) {
		t.Errorf("without a NetworkConfig: %v, want the exposure's %v", got, all)
	}
	s.Spec.Networking.ProviderConfig = &runtime.RawExtension{Raw: []byte(`{"apiVersion":"cilium.networking.extensions.gardener.cloud/v1alpha1",` +
		`"kind":"NetworkConfig","l2Announcements":{"enabled":true,"leaseDuration":"20s"}}`)}
	want := map[string]string{"l2-announcements-renew-deadline": "3s", "l2-announcements-retry-period": "500ms"}
	if got := L2LeaseTimings(s, cfg); !maps.Equal(got, want) {
		t.Errorf("with the NetworkConfig's leaseDuration: %v, want %v", got, want)
	}
}

// TestLoadLetsAWorkerJoinAnUnpinnedPool: a worker whose address lies in an unpinned pool (an ExternalIP among public
// VIPs) does not make a running exposure fail: LB-IPAM assigned the VIP long before. A VIP pinned to that address does.
func TestLoadLetsAWorkerJoinAnUnpinnedPool(t *testing.T) {
	site := Site{NodeAddresses: []netip.Addr{netip.MustParseAddr("203.0.113.5")}}
	if _, err := Load(exposureOnNodes(), shootWithNetworks(header+`"pool":{"cidrs":["203.0.113.0/28"]}}`), site); err != nil {
		t.Errorf("an unpinned pool holding a worker's address: %v", err)
	}
	_, err := Load(exposureOnNodes(), shootWithNetworks(header+`"pool":{"cidrs":["203.0.113.0/28"]},"loadBalancerIPs":["203.0.113.5"]}`), site)
	if err == nil || !strings.Contains(err.Error(), `loadBalancerIPs[0]: Invalid value: "203.0.113.5": is a node's own address`) {
		t.Errorf("a VIP pinned to a worker's address: %v", err)
	}
}
