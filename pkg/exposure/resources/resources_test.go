// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package resources

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/cilium/cilium/pkg/annotation"
	ciliumv2 "github.com/cilium/cilium/pkg/k8s/apis/cilium.io/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	extensionsv1alpha1 "github.com/gardener/gardener/pkg/apis/extensions/v1alpha1"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/addressing"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/apis/exposure"
)

func endpoint(node string, addrs ...corev1.NodeAddress) extensionsv1alpha1.ControlPlaneEndpoint {
	return extensionsv1alpha1.ControlPlaneEndpoint{NodeName: node, Addresses: addrs}
}

func internal(ip string) corev1.NodeAddress {
	return corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip}
}

func input(families []addressing.Family, cfg *exposure.ExposureConfig, endpoints ...extensionsv1alpha1.ControlPlaneEndpoint) Input {
	return Input{Name: "bare-metal", Namespace: "kube-system", Port: 443, Endpoints: endpoints, Families: families, Config: cfg}
}

func l2Config(cidrs ...string) *exposure.ExposureConfig {
	return &exposure.ExposureConfig{Announcement: exposure.AnnouncementL2, Pool: exposure.Pool{CIDRs: cidrs}, L2: &exposure.L2{}}
}

var dualStackEndpoints = []extensionsv1alpha1.ControlPlaneEndpoint{
	endpoint("cp-1", internal("10.0.1.11"), internal("fd00::11"), corev1.NodeAddress{Type: corev1.NodeHostName, Address: "cp-1"}),
	endpoint("cp-0", internal("10.0.1.10"), internal("fd00::10"), corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: "203.0.113.10"}),
}

func TestBuildIPv4L2(t *testing.T) {
	cfg := l2Config("203.0.113.10/32")
	cfg.LoadBalancerIPs = []string{"203.0.113.10"}
	cfg.L2 = &exposure.L2{Interfaces: []string{"^eth[0-9]+"}}
	objs, err := Build(input([]addressing.Family{addressing.IPv4}, cfg, dualStackEndpoints...))
	if err != nil {
		t.Fatal(err)
	}

	svc := objs.Service
	if svc.Name != "cilium-exposure-bare-metal" || svc.Namespace != "kube-system" || svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
		t.Errorf("service %s/%s type %s", svc.Namespace, svc.Name, svc.Spec.Type)
	}
	if svc.Spec.Selector != nil {
		t.Error("the Service must have no selector: its endpoints are the control-plane nodes, not pods")
	}
	if *svc.Spec.LoadBalancerClass != "io.cilium/l2-announcer" {
		t.Errorf("loadBalancerClass %s", *svc.Spec.LoadBalancerClass)
	}
	if !slices.Equal(svc.Spec.IPFamilies, []corev1.IPFamily{corev1.IPv4Protocol}) || *svc.Spec.IPFamilyPolicy != corev1.IPFamilyPolicySingleStack {
		t.Errorf("families %v policy %s", svc.Spec.IPFamilies, *svc.Spec.IPFamilyPolicy)
	}
	if p := svc.Spec.Ports; len(p) != 1 || p[0].Name != "https" || p[0].Port != 443 || p[0].TargetPort.IntVal != 443 {
		t.Errorf("ports %+v", p)
	}
	if svc.Annotations[annotation.LBIPAMIPsKey] != "203.0.113.10" {
		t.Errorf("annotations %v", svc.Annotations)
	}
	if len(svc.Status.LoadBalancer.Ingress) != 0 {
		t.Error("the builder must never set the Service status")
	}

	if len(objs.EndpointSlices) != 1 {
		t.Fatalf("%d slices", len(objs.EndpointSlices))
	}
	s := objs.EndpointSlices[0]
	if s.AddressType != "IPv4" || s.Labels["kubernetes.io/service-name"] != svc.Name || s.Labels["endpointslice.kubernetes.io/managed-by"] != "gardener-extension-cilium-selfhosted" {
		t.Errorf("slice %s type %s labels %v", s.Name, s.AddressType, s.Labels)
	}
	if *s.Ports[0].Name != "https" || *s.Ports[0].Port != 443 {
		t.Errorf("slice ports %+v", s.Ports)
	}
	var got []string
	for _, e := range s.Endpoints {
		got = append(got, *e.NodeName+"="+strings.Join(e.Addresses, ","))
		if !*e.Conditions.Ready || !*e.Conditions.Serving || *e.Conditions.Terminating {
			t.Errorf("conditions %+v", e.Conditions)
		}
	}
	if want := []string{"cp-0=10.0.1.10", "cp-1=10.0.1.11"}; !slices.Equal(got, want) {
		t.Errorf("endpoints %v, want %v (InternalIPs only, sorted)", got, want)
	}

	if objs.Pool.Spec.Blocks[0].Cidr != "203.0.113.10/32" || objs.Pool.Namespace != "" {
		t.Errorf("pool %+v", objs.Pool.Spec)
	}
	if sel := objs.Pool.Spec.ServiceSelector.MatchLabels; sel[LabelExposureName] != "bare-metal" || sel[LabelExposureNamespace] != "kube-system" {
		t.Errorf("pool selector %v", sel)
	}
	// Cilium matches service selectors against the Service's labels plus its namespace and name
	// (operator/pkg/lbipam svcLabels, pkg/l2announcer svcAndMetaLabels, pkg/bgp/manager/reconciler serviceLabelSet).
	asCiliumSees := func(svc *corev1.Service) map[string]string {
		l := maps.Clone(svc.Labels)
		l[SelectorKeyServiceNamespace], l[SelectorKeyServiceName] = svc.Namespace, svc.Name
		return l
	}
	lookAlike := svc.DeepCopy()
	lookAlike.Namespace = "default"
	for k, v := range objs.Pool.Spec.ServiceSelector.MatchLabels {
		if asCiliumSees(svc)[k] != v {
			t.Errorf("the pool's selector %s=%s does not match the Service", k, v)
		}
	}
	if objs.Pool.Spec.ServiceSelector.MatchLabels[SelectorKeyServiceNamespace] == asCiliumSees(lookAlike)[SelectorKeyServiceNamespace] {
		t.Error("the pool selects a Service with the same name and labels in another namespace")
	}
	if objs.Pool.Spec.AllowFirstLastIPs != ciliumv2.AllowFirstLastIPYes {
		t.Errorf("allowFirstLastIPs %q, want Yes: every address of the pool's blocks is a VIP", objs.Pool.Spec.AllowFirstLastIPs)
	}

	p := objs.L2Policy
	if p == nil || !p.Spec.LoadBalancerIPs || p.Spec.ExternalIPs || !slices.Equal(p.Spec.Interfaces, []string{"^eth[0-9]+"}) {
		t.Fatalf("L2 policy %+v", p)
	}
	if r := p.Spec.NodeSelector.MatchExpressions; len(r) != 1 || r[0].Key != "node-role.kubernetes.io/control-plane" || r[0].Operator != "Exists" {
		t.Errorf("default node selector %+v, want the control-plane nodes", p.Spec.NodeSelector)
	}
	if objs.Advertisement != nil || objs.ClusterConfig != nil || objs.PeerConfigs != nil {
		t.Error("L2 built BGP objects")
	}
	for _, obj := range objs.All() {
		if l := obj.GetLabels(); l[LabelExposureName] != "bare-metal" || l[LabelExposureNamespace] != "kube-system" || l["app.kubernetes.io/managed-by"] != "gardener-extension-cilium-selfhosted" {
			t.Errorf("%T %s labels %v", obj, obj.GetName(), l)
		}
		if obj.GetObjectKind().GroupVersionKind().Kind == "" {
			t.Errorf("%T has no kind, server-side apply needs it", obj)
		}
	}
	if all := objs.All(); all[len(all)-1] != svc {
		t.Error("the Service must be applied last, after its pool and slices")
	}
}

func TestBuildIPv6(t *testing.T) {
	objs, err := Build(input([]addressing.Family{addressing.IPv6}, l2Config("2001:db8::/120"), dualStackEndpoints...))
	if err != nil {
		t.Fatal(err)
	}
	if len(objs.EndpointSlices) != 1 || objs.EndpointSlices[0].AddressType != "IPv6" || objs.EndpointSlices[0].Endpoints[0].Addresses[0] != "fd00::10" {
		t.Errorf("slices %+v", objs.EndpointSlices)
	}
	if !slices.Equal(objs.Service.Spec.IPFamilies, []corev1.IPFamily{corev1.IPv6Protocol}) {
		t.Errorf("families %v", objs.Service.Spec.IPFamilies)
	}
}

func TestBuildDualStackBGP(t *testing.T) {
	cfg := &exposure.ExposureConfig{
		Announcement:    exposure.AnnouncementBGP,
		Pool:            exposure.Pool{CIDRs: []string{"203.0.113.0/28"}, Ranges: []exposure.IPRange{{Start: "2001:db8::10", Stop: "2001:db8::20"}}},
		LoadBalancerIPs: []string{"203.0.113.1", "2001:db8::10"},
		BGP: &exposure.BGP{
			LocalASN:    new(int64(64512)),
			Communities: &exposure.BGPCommunities{Standard: []string{"64512:100"}, WellKnown: []string{"no-export"}},
			Peers: []exposure.BGPPeer{
				{Name: "tor-a", Address: "10.0.0.1", ASN: 64500, HoldTimeSeconds: new(int32(9)), KeepAliveTimeSeconds: new(int32(3)),
					GracefulRestart: &exposure.BGPGracefulRestart{Enabled: true}, AuthSecretRef: new("tor-a-password")},
				{Name: "tor-b", Address: "10.0.0.2", ASN: 64501, EBGPMultihop: new(int32(2)), Port: new(int32(1179))},
			},
		},
	}
	objs, err := Build(input([]addressing.Family{addressing.IPv4, addressing.IPv6}, cfg, dualStackEndpoints...))
	if err != nil {
		t.Fatal(err)
	}
	svc := objs.Service
	if *svc.Spec.LoadBalancerClass != ciliumv2.BGPLoadBalancerClass || *svc.Spec.IPFamilyPolicy != corev1.IPFamilyPolicyRequireDualStack ||
		!slices.Equal(svc.Spec.IPFamilies, []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}) {
		t.Errorf("service %+v", svc.Spec)
	}
	if svc.Annotations[annotation.LBIPAMIPsKey] != "203.0.113.1,2001:db8::10" {
		t.Errorf("pinned %v", svc.Annotations)
	}
	if len(objs.EndpointSlices) != 2 || objs.EndpointSlices[0].AddressType != "IPv4" || objs.EndpointSlices[1].AddressType != "IPv6" {
		t.Errorf("want an IPv4 and an IPv6 slice, got %d", len(objs.EndpointSlices))
	}
	if b := objs.Pool.Spec.Blocks; len(b) != 2 || b[1].Start != "2001:db8::10" || b[1].Stop != "2001:db8::20" {
		t.Errorf("pool blocks %+v", b)
	}
	if objs.L2Policy != nil {
		t.Error("BGP built an L2 policy")
	}

	adv := objs.Advertisement.Spec.Advertisements
	if len(adv) != 1 || adv[0].AdvertisementType != ciliumv2.BGPServiceAdvert || !slices.Equal(adv[0].Service.Addresses, []ciliumv2.BGPServiceAddressType{ciliumv2.BGPLoadBalancerIPAddr}) {
		t.Fatalf("advertisement %+v", adv)
	}
	if adv[0].Selector.MatchLabels[LabelExposureName] != "bare-metal" {
		t.Errorf("advertisement selector %+v", adv[0].Selector)
	}
	if c := adv[0].Attributes.Communities; len(c.Standard) != 1 || c.Standard[0] != "64512:100" || c.WellKnown[0] != "no-export" {
		t.Errorf("communities %+v", c)
	}

	cc := objs.ClusterConfig.Spec
	if r := cc.NodeSelector.MatchExpressions; len(r) != 1 || r[0].Key != "node-role.kubernetes.io/control-plane" {
		t.Errorf("cluster config node selector %+v", cc.NodeSelector)
	}
	if len(cc.BGPInstances) != 1 || *cc.BGPInstances[0].LocalASN != 64512 || len(cc.BGPInstances[0].Peers) != 2 {
		t.Fatalf("instances %+v", cc.BGPInstances)
	}
	peerConfigs := map[string]*ciliumv2.CiliumBGPPeerConfig{}
	for _, pc := range objs.PeerConfigs {
		peerConfigs[pc.Name] = pc
	}
	for _, peer := range cc.BGPInstances[0].Peers {
		pc := peerConfigs[peer.PeerConfigRef.Name]
		if pc == nil {
			t.Fatalf("peer %s references a missing peer config %s", peer.Name, peer.PeerConfigRef.Name)
		}
		if len(pc.Spec.Families) != 2 || pc.Spec.Families[0].Afi != "ipv4" || pc.Spec.Families[1].Afi != "ipv6" || pc.Spec.Families[0].Safi != "unicast" {
			t.Errorf("%s families %+v", pc.Name, pc.Spec.Families)
		}
		for k, v := range pc.Spec.Families[0].Advertisements.MatchLabels {
			if objs.Advertisement.Labels[k] != v {
				t.Errorf("%s: families do not select the advertisement (%s=%s)", pc.Name, k, v)
			}
		}
	}
	a := peerConfigs[cc.BGPInstances[0].Peers[0].PeerConfigRef.Name].Spec
	if *a.Timers.HoldTimeSeconds != 9 || *a.Timers.KeepAliveTimeSeconds != 3 || !a.GracefulRestart.Enabled || *a.AuthSecretRef != "tor-a-password" || a.Transport != nil {
		t.Errorf("tor-a %+v", a)
	}
	b := peerConfigs[cc.BGPInstances[0].Peers[1].PeerConfigRef.Name].Spec
	if *b.EBGPMultihop != 2 || *b.Transport.PeerPort != 1179 || b.Timers != nil {
		t.Errorf("tor-b %+v", b)
	}
	if *cc.BGPInstances[0].Peers[1].PeerAddress != "10.0.0.2" || *cc.BGPInstances[0].Peers[1].PeerASN != 64501 {
		t.Errorf("tor-b peer %+v", cc.BGPInstances[0].Peers[1])
	}
}

func TestBuildBGPReusingClusterConfig(t *testing.T) {
	cfg := &exposure.ExposureConfig{
		Announcement: exposure.AnnouncementBGP,
		Pool:         exposure.Pool{CIDRs: []string{"203.0.113.0/28"}},
		BGP:          &exposure.BGP{ClusterConfigName: new("datacenter"), AdvertisementLabels: map[string]string{"advertise": "kube-apiserver"}},
	}
	objs, err := Build(input([]addressing.Family{addressing.IPv4}, cfg, dualStackEndpoints...))
	if err != nil {
		t.Fatal(err)
	}
	if objs.ClusterConfig != nil || objs.PeerConfigs != nil {
		t.Error("reusing a cluster config must not create one")
	}
	if objs.Advertisement.Labels["advertise"] != "kube-apiserver" {
		t.Errorf("advertisement labels %v", objs.Advertisement.Labels)
	}
}

func TestBuildCustomNodeSelector(t *testing.T) {
	cfg := l2Config("203.0.113.10/32")
	cfg.L2.NodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"rack": "a"}}
	objs, err := Build(input([]addressing.Family{addressing.IPv4}, cfg, dualStackEndpoints...))
	if err != nil {
		t.Fatal(err)
	}
	if sel := objs.L2Policy.Spec.NodeSelector; sel.MatchLabels["rack"] != "a" || len(sel.MatchExpressions) != 0 {
		t.Errorf("node selector %+v", sel)
	}
}

func TestBuildSplitsEndpointSlices(t *testing.T) {
	for _, n := range []int{1500, 5000} {
		var endpoints []extensionsv1alpha1.ControlPlaneEndpoint
		for i := range n {
			endpoints = append(endpoints, endpoint(fmt.Sprintf("cp-%d", i), internal(fmt.Sprintf("10.%d.%d.%d", i/65536, i/256%256, i%256))))
		}
		objs, err := Build(input([]addressing.Family{addressing.IPv4}, l2Config("203.0.113.10/32"), endpoints...))
		if err != nil {
			t.Fatal(err)
		}
		if want := (n + 999) / 1000; len(objs.EndpointSlices) != want {
			t.Fatalf("%d endpoints: %d slices, want %d", n, len(objs.EndpointSlices), want)
		}
		seen, names := map[string]bool{}, map[string]bool{}
		for i, s := range objs.EndpointSlices {
			if len(s.Endpoints) > 1000 || (i < len(objs.EndpointSlices)-1 && len(s.Endpoints) != 1000) {
				t.Errorf("%d endpoints: slice %d holds %d", n, i, len(s.Endpoints))
			}
			names[s.Name] = true
			for _, e := range s.Endpoints {
				seen[e.Addresses[0]] = true
			}
		}
		if len(seen) != n || len(names) != len(objs.EndpointSlices) {
			t.Errorf("%d endpoints: %d distinct addresses in %d distinct slices", n, len(seen), len(names))
		}
	}
}

func TestBuildRejectsBadEndpoints(t *testing.T) {
	hostnameOnly := endpoint("cp-9", corev1.NodeAddress{Type: corev1.NodeHostName, Address: "cp-9"})
	ipv6Only := endpoint("cp-6", internal("fd00::6"))
	for name, tc := range map[string]struct {
		in   Input
		want string
	}{
		"no endpoints":         {input([]addressing.Family{addressing.IPv4}, l2Config("203.0.113.10/32")), "spec.endpoints: Required"},
		"hostname only":        {input([]addressing.Family{addressing.IPv4}, l2Config("203.0.113.10/32"), dualStackEndpoints[0], hostnameOnly), "spec.endpoints[1].addresses"},
		"IPv6-only on IPv4":    {input([]addressing.Family{addressing.IPv4}, l2Config("203.0.113.10/32"), ipv6Only), "spec.endpoints[0].addresses"},
		"no IPv6 on dualstack": {input([]addressing.Family{addressing.IPv4, addressing.IPv6}, l2Config("203.0.113.10/32", "2001:db8::/120"), endpoint("cp-4", internal("10.0.0.4"))), "no endpoint has an IPv6 InternalIP"},
		"port out of range": {func() Input {
			in := input([]addressing.Family{addressing.IPv4}, l2Config("203.0.113.10/32"), dualStackEndpoints...)
			in.Port = 70000
			return in
		}(), "spec.port"},
	} {
		_, err := Build(tc.in)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one naming %q", name, err, tc.want)
		}
	}
}

func TestServiceNameStaysADNSLabel(t *testing.T) {
	long := strings.Repeat("a", 70)
	name := ServiceName(long)
	if len(name) > 63 || name == ServiceName(long+"b") {
		t.Errorf("ServiceName(%d chars) = %q", len(long), name)
	}
	if ServiceName("short") != "cilium-exposure-short" {
		t.Errorf("ServiceName(short) = %q", ServiceName("short"))
	}
}

// TestBuildPublishesNotReadyEndpoints: an endpoint whose kube-apiserver is not ready is published with ready and
// serving false (Cilium then selects it for no new connection), in each family by its own address; the others stay
// ready; EndpointAddresses names them as NotReady does.
func TestBuildPublishesNotReadyEndpoints(t *testing.T) {
	in := input([]addressing.Family{addressing.IPv4, addressing.IPv6}, l2Config("203.0.113.10/32", "2001:db8::/120"), dualStackEndpoints...)
	addrs, err := EndpointAddresses(in)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"10.0.1.10:443", "10.0.1.11:443", "[fd00::10]:443", "[fd00::11]:443"}; !slices.Equal(addrs, want) {
		t.Fatalf("endpoint addresses %v, want %v", addrs, want)
	}
	in.NotReady = map[string]string{"10.0.1.11:443": "GET /readyz: 503", "[fd00::10]:443": "connection refused"}
	objs, err := Build(in)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, s := range objs.EndpointSlices {
		for _, ep := range s.Endpoints {
			if *ep.Conditions.Ready != *ep.Conditions.Serving || *ep.Conditions.Terminating {
				t.Errorf("%s: conditions %+v, want ready = serving, not terminating", ep.Addresses[0], ep.Conditions)
			}
			got[ep.Addresses[0]] = *ep.Conditions.Ready
		}
	}
	want := map[string]bool{"10.0.1.10": true, "10.0.1.11": false, "fd00::10": false, "fd00::11": true}
	if !maps.Equal(got, want) {
		t.Errorf("ready by address %v, want %v", got, want)
	}
}
