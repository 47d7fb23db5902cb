// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package selfhostedshootexposure_test

import (
	"context"
	"maps"
	"strings"
	"testing"

	ciliumv2 "github.com/cilium/cilium/pkg/k8s/apis/cilium.io/v2"
	ciliumv2alpha1 "github.com/cilium/cilium/pkg/k8s/apis/cilium.io/v2alpha1"
	slimv1 "github.com/cilium/cilium/pkg/k8s/slim/k8s/apis/meta/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1beta1constants "github.com/gardener/gardener/pkg/apis/core/v1beta1/constants"
	extensionsv1alpha1 "github.com/gardener/gardener/pkg/apis/extensions/v1alpha1"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/addressing"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/apis/exposure"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/exposure/resources"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/fixtures"
)

// exposureObjects are the objects the extension builds for an exposure of the given name: announced by L2 or by BGP
// with a peer of its own, in a pool apart from the suite's exposures.
func exposureObjects(t *testing.T, name string, announcement exposure.Announcement) *resources.Objects {
	t.Helper()
	cfg := &exposure.ExposureConfig{Announcement: announcement, Pool: exposure.Pool{CIDRs: []string{"198.51.100.248/30"}}, L2: &exposure.L2{}}
	if announcement == exposure.AnnouncementBGP {
		cfg.L2 = nil
		cfg.BGP = &exposure.BGP{LocalASN: new(int64(64512)), Peers: []exposure.BGPPeer{{Name: "tor", Address: "10.255.0.1", ASN: 64513}}}
	}
	objs, err := resources.Build(resources.Input{
		Name: name, Namespace: "kube-system", Port: 443, Families: []addressing.Family{addressing.IPv4}, Config: cfg,
		Endpoints: []extensionsv1alpha1.ControlPlaneEndpoint{{NodeName: "cp-0", Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.10"}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// TestExtensionWritesOnlyExposureShapedObjects: with the extension's own identity, kube-apiserver lets through exactly
// what the extension builds for an exposure (L2 and BGP; a short name, and one long enough that every name is
// hashed), and refuses, by the chart's policy, what a thief of its token would write with the same labels: a slice for
// kube-dns, to a pod (outside exposureEndpointCIDRs), without node names or of names, a Service with external IPs or a
// selector, node ports, another port or target port, of another type or with an annotation of Cilium's, a Service
// named kube-apiserver, the objects of an exposure outside kube-system, pools and L2 policies that select other
// Services, pools outside the blocks the operator allows (exposurePoolCIDRs, set as testenv.InstallChart sets it), an
// L2 policy announcing external IPs, L2 policies and BGP cluster configs on nodes not selected by a label kubelets
// cannot set, BGP advertisements of other addresses or with well-known communities (the
// blackhole among them), a BGP peer with another peer config or outside the operator's exposurePeerCIDRs, and a peer
// config advertising every advertisement.
func TestExtensionWritesOnlyExposureShapedObjects(t *testing.T) {
	ctx := context.Background()
	asExtension := env.ExtensionClient(t)
	for _, tc := range []struct {
		name         string
		announcement exposure.Announcement
	}{
		{"confined-l2", exposure.AnnouncementL2},
		{"confined-bgp", exposure.AnnouncementBGP},
		{"confined-" + strings.Repeat("l", 50), exposure.AnnouncementL2},
		{"confined-" + strings.Repeat("b", 50), exposure.AnnouncementBGP},
	} {
		all := exposureObjects(t, tc.name, tc.announcement).All()
		for _, obj := range all {
			if err := asExtension.Create(ctx, obj); err != nil {
				t.Errorf("creating %T %s of exposure %s as the extension: %v", obj, obj.GetName(), tc.name, err)
			}
		}
		for _, obj := range all {
			if err := asExtension.Delete(ctx, obj); err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("deleting %T %s of exposure %s as the extension: %v", obj, obj.GetName(), tc.name, err)
			}
		}
	}

	for what, obj := range stolenObjects(t) {
		err := asExtension.Create(ctx, obj)
		if err == nil {
			_ = env.Client.Delete(ctx, obj)
		}
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "confine-writes") {
			t.Errorf("%s, written as the extension: %v, want a refusal by the chart's policy", what, err)
		}
	}
}

// stolenObjects are what a thief of the extension's token would write with an exposure's labels, by what each is.
func stolenObjects(t *testing.T) map[string]client.Object {
	t.Helper()
	l2 := exposureObjects(t, "stolen", exposure.AnnouncementL2)
	bgp := exposureObjects(t, "stolen", exposure.AnnouncementBGP)
	objs := stolenSlicesAndServices(l2)
	maps.Copy(objs, stolenCiliumObjects(l2, bgp))
	return objs
}

// stolenSlicesAndServices are slices, Services and a ConfigMap unlike the exposure's.
func stolenSlicesAndServices(l2 *resources.Objects) map[string]client.Object {
	svc := func(change func(*corev1.Service)) client.Object { return changed(l2.Service, change) }
	return map[string]client.Object{
		"a slice of kube-dns": changed(l2.EndpointSlices[0], func(s *discoveryv1.EndpointSlice) {
			s.Name, s.Labels[discoveryv1.LabelServiceName] = "kube-dns-stolen", "kube-dns"
		}),
		"a slice of the exposure's name for kube-dns": changed(l2.EndpointSlices[0], func(s *discoveryv1.EndpointSlice) {
			s.Labels[discoveryv1.LabelServiceName] = "kube-dns"
		}),
		"a slice to a pod": changed(l2.EndpointSlices[0], func(s *discoveryv1.EndpointSlice) {
			s.Endpoints[0].Addresses = []string{"100.64.3.17"}
		}),
		"a slice without node names": changed(l2.EndpointSlices[0], func(s *discoveryv1.EndpointSlice) { s.Endpoints[0].NodeName = nil }),
		"a slice of names": changed(l2.EndpointSlices[0], func(s *discoveryv1.EndpointSlice) {
			s.AddressType, s.Endpoints[0].Addresses = discoveryv1.AddressTypeFQDN, []string{"evil.example.com"}
		}),
		"a Service with node ports":                svc(func(s *corev1.Service) { s.Spec.AllocateLoadBalancerNodePorts = new(true) }),
		"a Service with a node port of its choice": svc(func(s *corev1.Service) { s.Spec.Ports[0].NodePort = 30443 }),
		"a Service with another port": svc(func(s *corev1.Service) {
			s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: "postgres", Protocol: corev1.ProtocolTCP, Port: 5432})
		}),
		"a Service to another port of its endpoints": svc(func(s *corev1.Service) { s.Spec.Ports[0].TargetPort = intstr.FromInt32(5432) }),
		"a Service forwarding kubelet's port": svc(func(s *corev1.Service) {
			s.Spec.Ports[0].Port, s.Spec.Ports[0].TargetPort = 10250, intstr.FromInt32(10250)
		}),
		"a slice to etcd's peer port": changed(l2.EndpointSlices[0], func(s *discoveryv1.EndpointSlice) { s.Ports[0].Port = new(int32(2380)) }),
		"a Service with external IPs": svc(func(s *corev1.Service) { s.Spec.ExternalIPs = []string{"198.51.100.250"} }),
		"a Service with a selector":   svc(func(s *corev1.Service) { s.Spec.Selector = map[string]string{"k8s-app": "kube-dns"} }),
		"a ClusterIP Service": svc(func(s *corev1.Service) {
			s.Spec.Type, s.Spec.LoadBalancerClass, s.Spec.AllocateLoadBalancerNodePorts, s.Spec.ExternalTrafficPolicy = corev1.ServiceTypeClusterIP, nil, nil, ""
		}),
		"a Service of another class": svc(func(s *corev1.Service) { s.Spec.LoadBalancerClass = new("metallb") }),
		"a Service with Cilium's global annotation": svc(func(s *corev1.Service) {
			s.Annotations = map[string]string{"service.cilium.io/global": "true"}
		}),
		"a kube-apiserver Service": svc(func(s *corev1.Service) { s.Name = "kube-apiserver" }),
		"a Service of an exposure outside kube-system": svc(func(s *corev1.Service) {
			s.Labels[resources.LabelExposureNamespace] = "default"
		}),
	}
}

// stolenCiliumObjects are Cilium's objects unlike the exposure's.
func stolenCiliumObjects(l2, bgp *resources.Objects) map[string]client.Object {
	selectAll := &slimv1.LabelSelector{MatchExpressions: []slimv1.LabelSelectorRequirement{{Key: resources.SelectorKeyServiceName, Operator: slimv1.LabelSelectorOpExists}}}
	selectKubeDNS := &slimv1.LabelSelector{MatchLabels: map[string]string{
		resources.SelectorKeyServiceNamespace: "kube-system", resources.SelectorKeyServiceName: "kube-dns",
		resources.LabelExposureName: "stolen", resources.LabelExposureNamespace: "kube-system",
	}}
	withCommunities := func(c ciliumv2.BGPCommunities) client.Object {
		return changed(bgp.Advertisement, func(a *ciliumv2.CiliumBGPAdvertisement) {
			a.Spec.Advertisements[0].Attributes = &ciliumv2.BGPAttributes{Communities: &c}
		})
	}
	return map[string]client.Object{
		"a ConfigMap of another name": &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "coredns-custom", Labels: resources.Labels("stolen", "kube-system")}},
		"a pool for every Service": changed(l2.Pool, func(p *ciliumv2.CiliumLoadBalancerIPPool) {
			p.Spec.ServiceSelector = selectAll
		}),
		"a pool without a selector": changed(l2.Pool, func(p *ciliumv2.CiliumLoadBalancerIPPool) {
			p.Spec.ServiceSelector = nil
		}),
		"a pool outside the operator's exposurePoolCIDRs": changed(l2.Pool, func(p *ciliumv2.CiliumLoadBalancerIPPool) {
			p.Spec.Blocks = []ciliumv2.CiliumLoadBalancerIPPoolIPBlock{{Cidr: "10.0.0.1/32"}}
		}),
		"a pool range reaching outside the operator's exposurePoolCIDRs": changed(l2.Pool, func(p *ciliumv2.CiliumLoadBalancerIPPool) {
			p.Spec.Blocks = []ciliumv2.CiliumLoadBalancerIPPoolIPBlock{{Start: "203.0.113.250", Stop: "203.0.114.1"}}
		}),
		"an L2 policy for kube-dns": changed(l2.L2Policy, func(p *ciliumv2alpha1.CiliumL2AnnouncementPolicy) {
			p.Spec.ServiceSelector = selectKubeDNS
		}),
		"an L2 policy announcing external IPs": changed(l2.L2Policy, func(p *ciliumv2alpha1.CiliumL2AnnouncementPolicy) {
			p.Spec.ExternalIPs = true
		}),
		"an L2 policy announcing from every node": changed(l2.L2Policy, func(p *ciliumv2alpha1.CiliumL2AnnouncementPolicy) {
			p.Spec.NodeSelector = nil
		}),
		"an L2 policy announcing from a node a kubelet names": changed(l2.L2Policy, func(p *ciliumv2alpha1.CiliumL2AnnouncementPolicy) {
			p.Spec.NodeSelector = &slimv1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/hostname": "worker-0"}}
		}),
		"a BGP cluster config on every node but the control plane": changed(bgp.ClusterConfig, func(c *ciliumv2.CiliumBGPClusterConfig) {
			c.Spec.NodeSelector = &slimv1.LabelSelector{MatchExpressions: []slimv1.LabelSelectorRequirement{{Key: "node-role.kubernetes.io/control-plane", Operator: slimv1.LabelSelectorOpDoesNotExist}}}
		}),
		"a BGP advertisement of the pod CIDRs": changed(bgp.Advertisement, func(a *ciliumv2.CiliumBGPAdvertisement) {
			a.Spec.Advertisements = []ciliumv2.BGPAdvertisement{{AdvertisementType: ciliumv2.BGPPodCIDRAdvert}}
		}),
		"a BGP advertisement of the Service's ClusterIP": changed(bgp.Advertisement, func(a *ciliumv2.CiliumBGPAdvertisement) {
			a.Spec.Advertisements[0].Service.Addresses = []ciliumv2.BGPServiceAddressType{ciliumv2.BGPClusterIPAddr}
		}),
		"a BGP advertisement of another Service": changed(bgp.Advertisement, func(a *ciliumv2.CiliumBGPAdvertisement) {
			a.Spec.Advertisements[0].Selector = selectKubeDNS
		}),
		"a BGP peer with another peer config": changed(bgp.ClusterConfig, func(c *ciliumv2.CiliumBGPClusterConfig) {
			c.Spec.BGPInstances[0].Peers[0].PeerConfigRef = &ciliumv2.PeerConfigReference{Name: "someone-elses"}
		}),
		"a BGP peer config advertising every advertisement": changed(bgp.PeerConfigs[0], func(p *ciliumv2.CiliumBGPPeerConfig) {
			p.Spec.Families[0].Advertisements = &slimv1.LabelSelector{}
		}),
		"a BGP peer outside the operator's exposurePeerCIDRs": changed(bgp.ClusterConfig, func(c *ciliumv2.CiliumBGPClusterConfig) {
			c.Spec.BGPInstances[0].Peers[0].PeerAddress = new("198.51.100.1")
		}),
		"a BGP advertisement with the blackhole community":             withCommunities(ciliumv2.BGPCommunities{Standard: []ciliumv2.BGPStandardCommunity{"65535:666"}}),
		"a BGP advertisement with the blackhole community as a number": withCommunities(ciliumv2.BGPCommunities{Standard: []ciliumv2.BGPStandardCommunity{"4294902426"}}),
		"a BGP advertisement with no-export":                           withCommunities(ciliumv2.BGPCommunities{WellKnown: []ciliumv2.BGPWellKnownCommunity{"no-export"}}),
		"a BGP advertisement with a large community of AS 65535":       withCommunities(ciliumv2.BGPCommunities{Large: []ciliumv2.BGPLargeCommunity{"65535:0:666"}}),
	}
}

// changed is a copy of obj with change applied.
func changed[T client.Object](obj T, change func(T)) client.Object {
	c := obj.DeepCopyObject().(T)
	change(c)
	return c
}

// TestExtensionKeepsTheExposureAsGardenerWroteIt: with the extension's own identity, which RBAC lets update and patch
// exposures in kube-system, an exposure's spec (its endpoints above all), labels, other finalizers and other
// operations are refused by the chart's policy; its finalizer and a reconcile request pass (dry runs).
func TestExtensionKeepsTheExposureAsGardenerWroteIt(t *testing.T) {
	ctx := context.Background()
	exp := inertExposure(t, "kept-as-written")
	asExtension := env.ExtensionClient(t)
	patch := func(change func(*extensionsv1alpha1.SelfHostedShootExposure)) error {
		changed := exp.DeepCopy()
		change(changed)
		return asExtension.Patch(ctx, changed, client.MergeFrom(exp), client.DryRunAll)
	}
	for what, change := range map[string]func(*extensionsv1alpha1.SelfHostedShootExposure){
		"moving an endpoint": func(e *extensionsv1alpha1.SelfHostedShootExposure) {
			e.Spec.Endpoints[0].Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.2.10"}}
		},
		"changing its port": func(e *extensionsv1alpha1.SelfHostedShootExposure) { e.Spec.Port = 10250 },
		"labelling it":      func(e *extensionsv1alpha1.SelfHostedShootExposure) { e.Labels = map[string]string{"stolen": "true"} },
		"adding a finalizer of another": func(e *extensionsv1alpha1.SelfHostedShootExposure) {
			e.Finalizers = append(e.Finalizers, "example.com/keep-forever")
		},
		"asking for its migration": func(e *extensionsv1alpha1.SelfHostedShootExposure) {
			metav1.SetMetaDataAnnotation(&e.ObjectMeta, v1beta1constants.GardenerOperation, v1beta1constants.GardenerOperationMigrate)
		},
	} {
		if err := patch(change); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "confine-exposure-writes") {
			t.Errorf("%s as the extension: %v, want a refusal by the chart's policy", what, err)
		}
	}
	for what, change := range map[string]func(*extensionsv1alpha1.SelfHostedShootExposure){
		"adding its finalizer": func(e *extensionsv1alpha1.SelfHostedShootExposure) {
			e.Finalizers = append(e.Finalizers, "extensions.gardener.cloud/selfhostedshootexposure")
		},
		"asking for a reconciliation": func(e *extensionsv1alpha1.SelfHostedShootExposure) {
			metav1.SetMetaDataAnnotation(&e.ObjectMeta, v1beta1constants.GardenerOperation, v1beta1constants.GardenerOperationReconcile)
		},
	} {
		if err := patch(change); err != nil {
			t.Errorf("%s as the extension: %v", what, err)
		}
	}
}

// inertExposure creates an exposure of the fixture's nodes that no extension reconciles (of another type, without an
// operation annotation), and deletes it when t ends.
func inertExposure(t *testing.T, name string) *extensionsv1alpha1.SelfHostedShootExposure {
	t.Helper()
	exp := fixtures.Exposure(name, fixtures.Nodes())
	exp.Spec.Type = "not-this-extension"
	delete(exp.Annotations, v1beta1constants.GardenerOperation)
	if err := env.Client.Create(context.Background(), exp); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), exp) })
	return exp
}
