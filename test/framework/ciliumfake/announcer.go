// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package ciliumfake

import (
	"context"
	"slices"
	"time"

	ciliumv2 "github.com/cilium/cilium/pkg/k8s/apis/cilium.io/v2"
	ciliumv2alpha1 "github.com/cilium/cilium/pkg/k8s/apis/cilium.io/v2alpha1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/cilium"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/exposure/resources"
)

// Announcer plays the Cilium agent of node, against c, as the announcer of every Service of a Cilium loadBalancerClass that
// has an address, except those of the exposures named in except, until ctx ends: for L2 it takes and renews the Service's announcement lease as Cilium's L2 announcer
// does (pkg/l2announcer, client-go leader election), for BGP it reports an established session that advertises
// routes in the node's CiliumBGPNodeConfig, as the BGP control plane does. Real agents announce in test/agents/datapath.
func Announcer(ctx context.Context, c client.Client, node string, except ...string) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
		_ = announce(ctx, c, node, except)
	}
}

// leaseDuration is the duration the fake announcer writes; it renews far more often.
const leaseDuration = 15

func announce(ctx context.Context, c client.Client, node string, except []string) error {
	services := &corev1.ServiceList{}
	if err := c.List(ctx, services); err != nil {
		return err
	}
	for _, svc := range services.Items {
		if len(svc.Status.LoadBalancer.Ingress) == 0 || svc.Spec.LoadBalancerClass == nil || slices.Contains(except, svc.Labels[resources.LabelExposureName]) {
			continue
		}
		switch *svc.Spec.LoadBalancerClass {
		case ciliumv2alpha1.L2AnnounceLoadBalancerClass:
			if err := HoldL2Lease(ctx, c, cilium.L2AnnouncementLeaseName(svc.Namespace, svc.Name), node); err != nil {
				return err
			}
		case ciliumv2.BGPLoadBalancerClass:
			if err := reportBGPSession(ctx, c, node); err != nil {
				return err
			}
		}
	}
	return nil
}

// HoldL2Lease takes, in c, the L2 announcement lease name in Cilium's namespace for node, as its agent would, or renews it if
// the last renewal is a second old or more.
func HoldL2Lease(ctx context.Context, c client.Client, name, node string) error {
	lease := &coordinationv1.Lease{}
	err := c.Get(ctx, client.ObjectKey{Namespace: cilium.Namespace, Name: name}, lease)
	now := metav1.NewMicroTime(time.Now())
	if apierrors.IsNotFound(err) {
		lease = &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: cilium.Namespace, Name: name},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity: ptr.To(node), LeaseDurationSeconds: ptr.To[int32](leaseDuration), AcquireTime: &now, RenewTime: &now,
			},
		}
		return c.Create(ctx, lease)
	}
	if err != nil {
		return err
	}
	if ptr.Deref(lease.Spec.HolderIdentity, "") == node && lease.Spec.RenewTime != nil && time.Since(lease.Spec.RenewTime.Time) < time.Second {
		return nil
	}
	lease.Spec.HolderIdentity, lease.Spec.LeaseDurationSeconds, lease.Spec.RenewTime = ptr.To(node), ptr.To[int32](leaseDuration), &now
	return c.Update(ctx, lease)
}

// reportBGPSession reports, in node's CiliumBGPNodeConfig (which the operator derives from the cluster config), an
// established session that advertises a route.
func reportBGPSession(ctx context.Context, c client.Client, node string) error {
	nc := &ciliumv2.CiliumBGPNodeConfig{}
	if err := c.Get(ctx, client.ObjectKey{Name: node}, nc); err != nil || len(nc.Status.BGPInstances) > 0 {
		return client.IgnoreNotFound(err)
	}
	instance := resources.BGPInstanceName
	if len(nc.Spec.BGPInstances) > 0 {
		instance = nc.Spec.BGPInstances[0].Name
	}
	nc.Status.BGPInstances = []ciliumv2.CiliumBGPNodeInstanceStatus{{
		Name: instance,
		PeerStatuses: []ciliumv2.CiliumBGPNodePeerStatus{{
			Name: "tor", PeerAddress: "10.0.0.1", PeeringState: ptr.To("established"),
			RouteCount: []ciliumv2.BGPFamilyRouteCount{{Afi: "ipv4", Safi: "unicast", Advertised: ptr.To[int32](1)}},
		}},
	}}
	return c.Status().Update(ctx, nc)
}
