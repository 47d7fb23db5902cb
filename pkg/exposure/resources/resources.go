// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

// Package resources builds, as pure functions of the exposure and its configuration, the objects that expose
// kube-apiserver on a Cilium VIP: a selector-less LoadBalancer Service with a Cilium loadBalancerClass, EndpointSlices
// with the control-plane node IPs, a CiliumLoadBalancerIPPool for the VIP, and a CiliumL2AnnouncementPolicy or the
// BGP control-plane objects.
package resources

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/cilium/cilium/pkg/annotation"
	ciliumv2 "github.com/cilium/cilium/pkg/k8s/apis/cilium.io/v2"
	ciliumv2alpha1 "github.com/cilium/cilium/pkg/k8s/apis/cilium.io/v2alpha1"
	slimv1 "github.com/cilium/cilium/pkg/k8s/slim/k8s/apis/meta/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1beta1constants "github.com/gardener/gardener/pkg/apis/core/v1beta1/constants"
	extensionsv1alpha1 "github.com/gardener/gardener/pkg/apis/extensions/v1alpha1"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/addressing"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/apis/exposure"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/identity"
)

const (
	// LabelExposureName and LabelExposureNamespace tie every object to exactly one SelfHostedShootExposure.
	LabelExposureName      = "selfhostedshootexposure.extensions.gardener.cloud/name"
	LabelExposureNamespace = "selfhostedshootexposure.extensions.gardener.cloud/namespace"

	// SelectorKeyServiceNamespace and SelectorKeyServiceName are the keys Cilium adds to a Service's labels when it
	// matches a service selector: LB-IPAM's pools (operator/pkg/lbipam svcLabels), L2 announcement policies
	// (pkg/l2announcer svcAndMetaLabels) and BGP advertisements (pkg/bgp/manager/reconciler serviceLabelSet), in
	// Cilium 1.19 and 1.20. Selecting by them, the exposure's objects serve its own Service and no look-alike.
	SelectorKeyServiceNamespace = "io.kubernetes.service.namespace"
	SelectorKeyServiceName      = "io.kubernetes.service.name"

	// LabelEndpointSliceManagedBy marks the slices as ours; Cilium ignores only its own mesh controller's slices.
	LabelEndpointSliceManagedBy = discoveryv1.LabelManagedBy

	// PortName names the Service port; EndpointSlice ports must carry the same name.
	PortName = "https"
	// BGPInstanceName is the BGP instance in the CiliumBGPClusterConfig.
	BGPInstanceName = "cilium-selfhosted"
	// maxEndpointsPerSlice is the API's limit of endpoints in one EndpointSlice.
	maxEndpointsPerSlice = 1000
)

// Input is what the objects are built from.
type Input struct {
	// Name and Namespace are those of the SelfHostedShootExposure.
	Name, Namespace string
	// Port is the port of kube-apiserver (spec.port).
	Port int32
	// Endpoints are the control-plane nodes (spec.endpoints).
	Endpoints []extensionsv1alpha1.ControlPlaneEndpoint
	// Families are the shoot's IP families (spec.networking.ipFamilies), in its order.
	Families []addressing.Family
	// Config is the validated, defaulted exposure configuration.
	Config *exposure.ExposureConfig
	// NotReady are the endpoints, by EndpointAddress, whose kube-apiserver is not ready: published with ready and
	// serving false, so that Cilium sends them no new connection.
	NotReady map[string]string
}

// EndpointAddress is how an endpoint's kube-apiserver is reached, and how NotReady names it: InternalIP:port.
func EndpointAddress(ip string, port int32) string {
	return net.JoinHostPort(ip, strconv.Itoa(int(port)))
}

// EndpointAddresses are the addresses of the endpoints the exposure publishes.
func EndpointAddresses(in Input) ([]string, error) {
	byFamily, err := endpointAddresses(in)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, f := range in.Families {
		for _, a := range byFamily[f] {
			out = append(out, EndpointAddress(a.addr.String(), in.Port))
		}
	}
	return out, nil
}

// Objects are the desired objects of one exposure.
type Objects struct {
	Service        *corev1.Service
	EndpointSlices []*discoveryv1.EndpointSlice
	Pool           *ciliumv2.CiliumLoadBalancerIPPool
	// L2Policy is set for announcement L2.
	L2Policy *ciliumv2alpha1.CiliumL2AnnouncementPolicy
	// Advertisement is set for announcement BGP.
	Advertisement *ciliumv2.CiliumBGPAdvertisement
	// ClusterConfig and PeerConfigs are set for announcement BGP unless an existing cluster config is reused.
	ClusterConfig *ciliumv2.CiliumBGPClusterConfig
	PeerConfigs   []*ciliumv2.CiliumBGPPeerConfig
}

// All are the objects in the order to apply them: what the Service's VIP depends on first, the Service last.
func (o *Objects) All() []client.Object {
	objs := []client.Object{o.Pool}
	if o.L2Policy != nil {
		objs = append(objs, o.L2Policy)
	}
	for _, p := range o.PeerConfigs {
		objs = append(objs, p)
	}
	if o.ClusterConfig != nil {
		objs = append(objs, o.ClusterConfig)
	}
	if o.Advertisement != nil {
		objs = append(objs, o.Advertisement)
	}
	for _, s := range o.EndpointSlices {
		objs = append(objs, s)
	}
	return append(objs, o.Service)
}

// Labels are the labels of every object of the exposure.
func Labels(name, namespace string) map[string]string {
	return map[string]string{
		identity.LabelManagedBy: identity.Name,
		LabelExposureName:       name,
		LabelExposureNamespace:  namespace,
	}
}

// ServiceName is the name of the exposure's Service in its namespace.
func ServiceName(exposureName string) string {
	return dnsLabel("cilium-exposure-" + exposureName)
}

// ClusterScopedName names the cluster-scoped objects of the exposure namespace/name, which must not collide between
// namespaces; the BGP peer configs add the peer to it.
func ClusterScopedName(namespace, name string) string {
	return dnsLabel("cilium-exposure-" + namespace + "-" + name)
}

// dnsLabel keeps a name within 63 characters, replacing an overlong tail by a hash so that names stay unique.
func dnsLabel(name string) string {
	if len(name) <= 63 {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	return strings.TrimRight(name[:52], "-.") + "-" + hex.EncodeToString(sum[:])[:10]
}

// Build builds the objects of an exposure. It fails, naming the field, when the endpoints cannot be load-balanced.
func Build(in Input) (*Objects, error) {
	addrs, err := endpointAddresses(in)
	if err != nil {
		return nil, err
	}
	o := &Objects{
		Service: service(in),
		Pool:    pool(in),
	}
	for _, f := range in.Families {
		o.EndpointSlices = append(o.EndpointSlices, endpointSlices(in, f, addrs[f])...)
	}
	switch in.Config.Announcement {
	case exposure.AnnouncementL2:
		o.L2Policy = l2Policy(in)
	case exposure.AnnouncementBGP:
		o.Advertisement = bgpAdvertisement(in)
		if in.Config.BGP.ClusterConfigName == nil {
			o.ClusterConfig = bgpClusterConfig(in)
			o.PeerConfigs = bgpPeerConfigs(in)
		}
	default:
		return nil, field.NotSupported(field.NewPath("providerConfig", "announcement"), in.Config.Announcement,
			[]exposure.Announcement{exposure.AnnouncementL2, exposure.AnnouncementBGP})
	}
	return o, nil
}

type nodeAddr struct {
	node string
	addr netip.Addr
}

// endpointAddresses picks the InternalIPs of each family from the endpoints. Hostnames and external addresses are
// never used: a name may resolve to the VIP itself, and kube-apiserver listens on the node's internal address.
func endpointAddresses(in Input) (map[addressing.Family][]nodeAddr, error) {
	endpointsPath := field.NewPath("spec", "endpoints")
	if len(in.Endpoints) == 0 {
		return nil, field.Required(endpointsPath, "no control-plane endpoint to expose")
	}
	if in.Port < 1 || in.Port > 65535 {
		return nil, field.Invalid(field.NewPath("spec", "port"), in.Port, "must be between 1 and 65535")
	}
	byFamily := map[addressing.Family][]nodeAddr{}
	var errs field.ErrorList
	for i, ep := range in.Endpoints {
		found := false
		for _, a := range ep.Addresses {
			if a.Type != corev1.NodeInternalIP {
				continue
			}
			addr, err := netip.ParseAddr(a.Address)
			if err != nil {
				continue
			}
			addr = addr.Unmap()
			if f := addressing.FamilyOf(addr); slices.Contains(in.Families, f) {
				byFamily[f] = append(byFamily[f], nodeAddr{node: ep.NodeName, addr: addr})
				found = true
			}
		}
		if !found {
			errs = append(errs, field.Invalid(endpointsPath.Index(i).Child("addresses"), describe(ep.Addresses),
				fmt.Sprintf("node %s has no InternalIP of the shoot's IP families %v; hostnames and external addresses cannot be load-balanced", ep.NodeName, in.Families)))
		}
	}
	for _, f := range in.Families {
		if len(byFamily[f]) == 0 {
			errs = append(errs, field.Required(endpointsPath, fmt.Sprintf("no endpoint has an %s InternalIP, but the shoot has IP family %s", f, f)))
		}
		slices.SortFunc(byFamily[f], func(a, b nodeAddr) int { return a.addr.Compare(b.addr) })
		byFamily[f] = slices.CompactFunc(byFamily[f], func(a, b nodeAddr) bool { return a.addr == b.addr })
	}
	if len(errs) > 0 {
		return nil, errs.ToAggregate()
	}
	return byFamily, nil
}

func describe(addrs []corev1.NodeAddress) string {
	parts := make([]string, 0, len(addrs))
	for _, a := range addrs {
		parts = append(parts, string(a.Type)+"="+a.Address)
	}
	return strings.Join(parts, ",")
}

func objectMeta(name, namespace string, in Input) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: Labels(in.Name, in.Namespace)}
}

// serviceSelector selects the exposure's Service, and only it, for LB-IPAM, the L2 announcer and the BGP
// advertisement: by its namespace and name, which no other Service can carry, and by its ownership labels.
func serviceSelector(in Input) *slimv1.LabelSelector {
	return &slimv1.LabelSelector{MatchLabels: map[string]string{
		SelectorKeyServiceNamespace: in.Namespace,
		SelectorKeyServiceName:      ServiceName(in.Name),
		LabelExposureName:           in.Name,
		LabelExposureNamespace:      in.Namespace,
	}}
}

// controlPlaneNodes selects the control-plane nodes, the default announcers: the VIP then lives where
// kube-apiserver runs, and a worker's failure never moves it.
func controlPlaneNodes() *slimv1.LabelSelector {
	return &slimv1.LabelSelector{MatchExpressions: []slimv1.LabelSelectorRequirement{{
		Key: v1beta1constants.LabelNodeRoleControlPlane, Operator: slimv1.LabelSelectorOpExists,
	}}}
}

func nodeSelector(sel *metav1.LabelSelector) *slimv1.LabelSelector {
	if sel == nil {
		return controlPlaneNodes()
	}
	out := &slimv1.LabelSelector{MatchLabels: sel.MatchLabels}
	for _, r := range sel.MatchExpressions {
		out.MatchExpressions = append(out.MatchExpressions, slimv1.LabelSelectorRequirement{
			Key: r.Key, Operator: slimv1.LabelSelectorOperator(r.Operator), Values: r.Values,
		})
	}
	return out
}

func loadBalancerClass(a exposure.Announcement) string {
	if a == exposure.AnnouncementBGP {
		return ciliumv2.BGPLoadBalancerClass
	}
	return ciliumv2alpha1.L2AnnounceLoadBalancerClass
}

// service is the selector-less LoadBalancer Service whose VIP Cilium assigns (LB-IPAM) and announces. Its status is
// never built: LB-IPAM replaces the whole status and strips addresses it did not allocate.
func service(in Input) *corev1.Service {
	svc := &corev1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: objectMeta(ServiceName(in.Name), in.Namespace, in),
		Spec: corev1.ServiceSpec{
			Type:              corev1.ServiceTypeLoadBalancer,
			LoadBalancerClass: new(loadBalancerClass(in.Config.Announcement)),
			Ports: []corev1.ServicePort{{
				Name: PortName, Protocol: corev1.ProtocolTCP, Port: in.Port, TargetPort: intstr.FromInt32(in.Port),
			}},
			// Cilium's kube-proxy replacement serves the VIP directly; NodePorts would only open kube-apiserver on
			// every node's address.
			AllocateLoadBalancerNodePorts: new(false),
			ExternalTrafficPolicy:         corev1.ServiceExternalTrafficPolicyCluster,
			IPFamilyPolicy:                new(corev1.IPFamilyPolicySingleStack),
		},
	}
	for _, f := range in.Families {
		svc.Spec.IPFamilies = append(svc.Spec.IPFamilies, corev1.IPFamily(f))
	}
	if len(in.Families) > 1 {
		svc.Spec.IPFamilyPolicy = new(corev1.IPFamilyPolicyRequireDualStack)
	}
	if len(in.Config.LoadBalancerIPs) > 0 {
		svc.Annotations = map[string]string{annotation.LBIPAMIPsKey: strings.Join(in.Config.LoadBalancerIPs, ",")}
	}
	return svc
}

// endpointSlices are the slices of one family, at most 1000 endpoints each. nodeName is set on every endpoint: Cilium
// counts a backend as local to a node only by it (BGP and L2 with externalTrafficPolicy Local).
func endpointSlices(in Input, f addressing.Family, addrs []nodeAddr) []*discoveryv1.EndpointSlice {
	var slices []*discoveryv1.EndpointSlice
	for i := 0; i < len(addrs); i += maxEndpointsPerSlice {
		chunk := addrs[i:min(i+maxEndpointsPerSlice, len(addrs))]
		name := fmt.Sprintf("%s-%s", ServiceName(in.Name), strings.ToLower(string(f)))
		if i > 0 {
			name = fmt.Sprintf("%s-%d", name, i/maxEndpointsPerSlice)
		}
		s := &discoveryv1.EndpointSlice{
			TypeMeta:    metav1.TypeMeta{APIVersion: "discovery.k8s.io/v1", Kind: "EndpointSlice"},
			ObjectMeta:  objectMeta(name, in.Namespace, in),
			AddressType: discoveryv1.AddressType(f),
			Ports:       []discoveryv1.EndpointPort{{Name: new(PortName), Protocol: new(corev1.ProtocolTCP), Port: new(in.Port)}},
		}
		s.Labels[discoveryv1.LabelServiceName] = ServiceName(in.Name)
		s.Labels[LabelEndpointSliceManagedBy] = identity.Name
		for _, a := range chunk {
			_, out := in.NotReady[EndpointAddress(a.addr.String(), in.Port)]
			s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{
				Addresses:  []string{a.addr.String()},
				NodeName:   new(a.node),
				Conditions: discoveryv1.EndpointConditions{Ready: new(!out), Serving: new(!out), Terminating: new(false)},
			})
		}
		slices = append(slices, s)
	}
	return slices
}

func pool(in Input) *ciliumv2.CiliumLoadBalancerIPPool {
	p := &ciliumv2.CiliumLoadBalancerIPPool{
		TypeMeta:   metav1.TypeMeta{APIVersion: ciliumv2.SchemeGroupVersion.String(), Kind: "CiliumLoadBalancerIPPool"},
		ObjectMeta: objectMeta(ClusterScopedName(in.Namespace, in.Name), "", in),
		// The pool's CIDRs are blocks of VIPs, not subnets: every address is usable, as Cilium does when the field is
		// unset (operator/pkg/lbipam reserves the first and last address only for "No"). Explicit, so that a pinned
		// VIP at either end never depends on a default.
		Spec: ciliumv2.CiliumLoadBalancerIPPoolSpec{ServiceSelector: serviceSelector(in), AllowFirstLastIPs: ciliumv2.AllowFirstLastIPYes},
	}
	for _, c := range in.Config.Pool.CIDRs {
		p.Spec.Blocks = append(p.Spec.Blocks, ciliumv2.CiliumLoadBalancerIPPoolIPBlock{Cidr: ciliumv2.IPv4orIPv6CIDR(c)})
	}
	for _, r := range in.Config.Pool.Ranges {
		p.Spec.Blocks = append(p.Spec.Blocks, ciliumv2.CiliumLoadBalancerIPPoolIPBlock{Start: r.Start, Stop: r.Stop})
	}
	return p
}

func l2Policy(in Input) *ciliumv2alpha1.CiliumL2AnnouncementPolicy {
	p := &ciliumv2alpha1.CiliumL2AnnouncementPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: ciliumv2alpha1.SchemeGroupVersion.String(), Kind: "CiliumL2AnnouncementPolicy"},
		ObjectMeta: objectMeta(ClusterScopedName(in.Namespace, in.Name), "", in),
		Spec: ciliumv2alpha1.CiliumL2AnnouncementPolicySpec{
			ServiceSelector: serviceSelector(in),
			NodeSelector:    controlPlaneNodes(),
			LoadBalancerIPs: true,
		},
	}
	if l2 := in.Config.L2; l2 != nil {
		p.Spec.NodeSelector = nodeSelector(l2.NodeSelector)
		p.Spec.Interfaces = l2.Interfaces
	}
	return p
}

func bgpAdvertisement(in Input) *ciliumv2.CiliumBGPAdvertisement {
	a := &ciliumv2.CiliumBGPAdvertisement{
		TypeMeta:   metav1.TypeMeta{APIVersion: ciliumv2.SchemeGroupVersion.String(), Kind: "CiliumBGPAdvertisement"},
		ObjectMeta: objectMeta(ClusterScopedName(in.Namespace, in.Name), "", in),
		Spec: ciliumv2.CiliumBGPAdvertisementSpec{Advertisements: []ciliumv2.BGPAdvertisement{{
			AdvertisementType: ciliumv2.BGPServiceAdvert,
			Service:           &ciliumv2.BGPServiceOptions{Addresses: []ciliumv2.BGPServiceAddressType{ciliumv2.BGPLoadBalancerIPAddr}},
			Selector:          serviceSelector(in),
		}}},
	}
	for k, v := range in.Config.BGP.AdvertisementLabels {
		a.Labels[k] = v
	}
	if c := in.Config.BGP.Communities; c != nil {
		communities := &ciliumv2.BGPCommunities{}
		for _, s := range c.Standard {
			communities.Standard = append(communities.Standard, ciliumv2.BGPStandardCommunity(s))
		}
		for _, s := range c.WellKnown {
			communities.WellKnown = append(communities.WellKnown, ciliumv2.BGPWellKnownCommunity(s))
		}
		for _, s := range c.Large {
			communities.Large = append(communities.Large, ciliumv2.BGPLargeCommunity(s))
		}
		a.Spec.Advertisements[0].Attributes = &ciliumv2.BGPAttributes{Communities: communities}
	}
	return a
}

func peerConfigName(in Input, peer exposure.BGPPeer) string {
	return dnsLabel(ClusterScopedName(in.Namespace, in.Name) + "-" + peer.Name)
}

func bgpClusterConfig(in Input) *ciliumv2.CiliumBGPClusterConfig {
	instance := ciliumv2.CiliumBGPInstance{Name: BGPInstanceName, LocalASN: in.Config.BGP.LocalASN}
	for _, peer := range in.Config.BGP.Peers {
		instance.Peers = append(instance.Peers, ciliumv2.CiliumBGPPeer{
			Name:          peer.Name,
			PeerAddress:   new(peer.Address),
			PeerASN:       new(peer.ASN),
			PeerConfigRef: &ciliumv2.PeerConfigReference{Name: peerConfigName(in, peer)},
		})
	}
	return &ciliumv2.CiliumBGPClusterConfig{
		TypeMeta:   metav1.TypeMeta{APIVersion: ciliumv2.SchemeGroupVersion.String(), Kind: "CiliumBGPClusterConfig"},
		ObjectMeta: objectMeta(ClusterScopedName(in.Namespace, in.Name), "", in),
		Spec: ciliumv2.CiliumBGPClusterConfigSpec{
			NodeSelector: nodeSelector(in.Config.BGP.NodeSelector),
			BGPInstances: []ciliumv2.CiliumBGPInstance{instance},
		},
	}
}

// bgpPeerConfigs are one CiliumBGPPeerConfig per peer (timers, auth and multihop are per peer), each announcing the
// exposure's advertisement in the shoot's address families.
func bgpPeerConfigs(in Input) []*ciliumv2.CiliumBGPPeerConfig {
	var families []ciliumv2.CiliumBGPFamilyWithAdverts
	for _, f := range in.Families {
		families = append(families, ciliumv2.CiliumBGPFamilyWithAdverts{
			CiliumBGPFamily: ciliumv2.CiliumBGPFamily{Afi: strings.ToLower(string(f)), Safi: "unicast"},
			Advertisements:  &slimv1.LabelSelector{MatchLabels: Labels(in.Name, in.Namespace)},
		})
	}
	var configs []*ciliumv2.CiliumBGPPeerConfig
	for _, peer := range in.Config.BGP.Peers {
		spec := ciliumv2.CiliumBGPPeerConfigSpec{
			AuthSecretRef: peer.AuthSecretRef,
			EBGPMultihop:  peer.EBGPMultihop,
			Families:      families,
		}
		if peer.Port != nil {
			spec.Transport = &ciliumv2.CiliumBGPTransport{PeerPort: peer.Port}
		}
		if peer.HoldTimeSeconds != nil || peer.KeepAliveTimeSeconds != nil || peer.ConnectRetryTimeSeconds != nil {
			spec.Timers = &ciliumv2.CiliumBGPTimers{
				HoldTimeSeconds:         peer.HoldTimeSeconds,
				KeepAliveTimeSeconds:    peer.KeepAliveTimeSeconds,
				ConnectRetryTimeSeconds: peer.ConnectRetryTimeSeconds,
			}
		}
		if gr := peer.GracefulRestart; gr != nil {
			spec.GracefulRestart = &ciliumv2.CiliumBGPNeighborGracefulRestart{Enabled: gr.Enabled, RestartTimeSeconds: gr.RestartTimeSeconds}
		}
		configs = append(configs, &ciliumv2.CiliumBGPPeerConfig{
			TypeMeta:   metav1.TypeMeta{APIVersion: ciliumv2.SchemeGroupVersion.String(), Kind: "CiliumBGPPeerConfig"},
			ObjectMeta: objectMeta(peerConfigName(in, peer), "", in),
			Spec:       spec,
		})
	}
	return configs
}
