// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

// Package ciliumfake holds the test doubles of Cilium's components for the suites that run without them: LBIPAM
// stands for cilium-operator (LB-IPAM and the BGP control plane's node configs), Announcer for one node's cilium-agent
// as an L2 announcer or BGP speaker. test/integration and the bench's envtest sections use both; test/operator and the
// demo run the real operator and use only Announcer; test/agents runs the real operator and agents and uses neither.
package ciliumfake

import (
	"context"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/cilium/cilium/pkg/annotation"
	ciliumv2 "github.com/cilium/cilium/pkg/k8s/apis/cilium.io/v2"
	ciliumv2alpha1 "github.com/cilium/cilium/pkg/k8s/apis/cilium.io/v2alpha1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/exposure/resources"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/testenv"
)

// LBIPAM plays Cilium's operator against c until ctx ends, as far as the exposure needs it. LB-IPAM: a Service of a Cilium
// loadBalancerClass without ingress gets the IPs it pins (lbipam.cilium.io/ips), else the first address of each of its
// families from the first pool that selects it, written to its status. The BGP control plane: each CiliumBGPClusterConfig
// of an exposure gets a CiliumBGPNodeConfig on cp-0. The real operator runs in test/operator.
func LBIPAM(ctx context.Context, c client.Client) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
		_ = assignVIPs(ctx, c)
		_ = deriveBGPNodeConfig(ctx, c, "cp-0")
	}
}

// deriveBGPNodeConfig creates node's CiliumBGPNodeConfig with the instances of the exposures' cluster configs.
func deriveBGPNodeConfig(ctx context.Context, c client.Client, node string) error {
	configs := &ciliumv2.CiliumBGPClusterConfigList{}
	if err := c.List(ctx, configs); err != nil || len(configs.Items) == 0 {
		return err
	}
	nc := &ciliumv2.CiliumBGPNodeConfig{ObjectMeta: metav1.ObjectMeta{Name: node}}
	for _, cc := range configs.Items {
		for _, instance := range cc.Spec.BGPInstances {
			nc.Spec.BGPInstances = append(nc.Spec.BGPInstances, ciliumv2.CiliumBGPNodeInstance{Name: instance.Name, LocalASN: instance.LocalASN})
		}
	}
	if err := c.Create(ctx, nc); !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

func assignVIPs(ctx context.Context, c client.Client) error {
	services := &corev1.ServiceList{}
	if err := c.List(ctx, services); err != nil {
		return err
	}
	pools := &ciliumv2.CiliumLoadBalancerIPPoolList{}
	if err := c.List(ctx, pools); err != nil {
		return err
	}
	for i := range services.Items {
		svc := &services.Items[i]
		class := ""
		if svc.Spec.LoadBalancerClass != nil {
			class = *svc.Spec.LoadBalancerClass
		}
		if svc.Spec.Type != corev1.ServiceTypeLoadBalancer || (class != ciliumv2alpha1.L2AnnounceLoadBalancerClass && class != ciliumv2.BGPLoadBalancerClass) {
			continue
		}
		// An address stays unless the Service pins another one, as with LB-IPAM.
		ips := requestedOrFirstIPs(svc, pools.Items)
		if len(ips) == 0 || (len(svc.Status.LoadBalancer.Ingress) > 0 && (svc.Annotations[annotation.LBIPAMIPsKey] == "" || slices.Equal(ips, ingressIPs(svc)))) {
			continue
		}
		svc.Status.LoadBalancer.Ingress = nil
		for _, ip := range ips {
			svc.Status.LoadBalancer.Ingress = append(svc.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: ip})
		}
		_ = c.Status().Update(ctx, svc)
	}
	return nil
}

func ingressIPs(svc *corev1.Service) []string {
	var ips []string
	for _, in := range svc.Status.LoadBalancer.Ingress {
		ips = append(ips, in.IP)
	}
	return ips
}

func requestedOrFirstIPs(svc *corev1.Service, pools []ciliumv2.CiliumLoadBalancerIPPool) []string {
	if v := svc.Annotations[annotation.LBIPAMIPsKey]; v != "" {
		return strings.Split(v, ",")
	}
	// As LB-IPAM matches them (operator/pkg/lbipam svcLabels).
	svcLabels := maps.Clone(svc.Labels)
	if svcLabels == nil {
		svcLabels = map[string]string{}
	}
	svcLabels[resources.SelectorKeyServiceNamespace], svcLabels[resources.SelectorKeyServiceName] = svc.Namespace, svc.Name
	for _, pool := range pools {
		if pool.Spec.ServiceSelector == nil || !labels.SelectorFromSet(pool.Spec.ServiceSelector.MatchLabels).Matches(labels.Set(svcLabels)) {
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

// Use is a testenv.Setup that keeps the environment and plays, in it until the suite ends, Cilium's LB-IPAM (LBIPAM) and
// the agent of cp-0 as the VIP's announcer (Announcer).
func Use(env **testenv.Env) testenv.Setup {
	return func(ctx context.Context, e *testenv.Env) (func(), error) {
		*env = e
		ctx, cancel := context.WithCancel(ctx)
		go LBIPAM(ctx, e.Client)
		go Announcer(ctx, e.Client, "cp-0")
		return cancel, nil
	}
}
