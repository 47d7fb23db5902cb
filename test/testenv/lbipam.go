package testenv

import (
	"context"
	"net/netip"
	"strings"
	"time"

	ciliumv2 "github.com/cilium/cilium/pkg/k8s/apis/cilium.io/v2"
	ciliumv2alpha1 "github.com/cilium/cilium/pkg/k8s/apis/cilium.io/v2alpha1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// FakeLBIPAM plays Cilium's LB-IPAM until ctx ends, as far as the exposure needs it: a Service of a Cilium
// loadBalancerClass without ingress gets the IPs it pins (lbipam.cilium.io/ips), else the first address of each of its
// families from the first pool that selects it, written to its status. Real LB-IPAM runs in the e2e suite.
func (e *Env) FakeLBIPAM(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
		_ = e.assignVIPs(ctx)
	}
}

func (e *Env) assignVIPs(ctx context.Context) error {
	services := &corev1.ServiceList{}
	if err := e.Client.List(ctx, services); err != nil {
		return err
	}
	pools := &ciliumv2.CiliumLoadBalancerIPPoolList{}
	if err := e.Client.List(ctx, pools); err != nil {
		return err
	}
	for i := range services.Items {
		svc := &services.Items[i]
		class := ""
		if svc.Spec.LoadBalancerClass != nil {
			class = *svc.Spec.LoadBalancerClass
		}
		if svc.Spec.Type != corev1.ServiceTypeLoadBalancer || len(svc.Status.LoadBalancer.Ingress) > 0 ||
			(class != ciliumv2alpha1.L2AnnounceLoadBalancerClass && class != ciliumv2.BGPLoadBalancerClass) {
			continue
		}
		ips := requestedOrFirstIPs(svc, pools.Items)
		if len(ips) == 0 {
			continue
		}
		for _, ip := range ips {
			svc.Status.LoadBalancer.Ingress = append(svc.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: ip})
		}
		_ = e.Client.Status().Update(ctx, svc)
	}
	return nil
}

func requestedOrFirstIPs(svc *corev1.Service, pools []ciliumv2.CiliumLoadBalancerIPPool) []string {
	if v := svc.Annotations["lbipam.cilium.io/ips"]; v != "" {
		return strings.Split(v, ",")
	}
	for _, pool := range pools {
		if pool.Spec.ServiceSelector == nil || !labels.SelectorFromSet(pool.Spec.ServiceSelector.MatchLabels).Matches(labels.Set(svc.Labels)) {
			continue
		}
		var ips []string
		for _, family := range svc.Spec.IPFamilies {
			for _, block := range pool.Spec.Blocks {
				first := block.Start
				if block.Cidr != "" {
					if prefix, err := netip.ParsePrefix(string(block.Cidr)); err == nil {
						first = prefix.Addr().String()
					}
				}
				if addr, err := netip.ParseAddr(first); err == nil && addr.Is4() == (family == corev1.IPv4Protocol) {
					ips = append(ips, first)
					break
				}
			}
		}
		return ips
	}
	return nil
}
