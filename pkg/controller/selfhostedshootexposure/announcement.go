// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package selfhostedshootexposure

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	ciliumv2 "github.com/cilium/cilium/pkg/k8s/apis/cilium.io/v2"
	slimlabels "github.com/cilium/cilium/pkg/k8s/slim/k8s/apis/labels"
	slimv1 "github.com/cilium/cilium/pkg/k8s/slim/k8s/apis/meta/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	reconcilerutils "github.com/gardener/gardener/pkg/controllerutils/reconciler"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/cilium"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/exposure/resources"
)

// announcementPoll is how often the announcement is looked at while waiting: it is read from kube-apiserver, not a
// cache (the extension watches neither leases nor Cilium's node status).
const announcementPoll = 200 * time.Millisecond

// waitForAnnouncement waits, within ingressWait, until Cilium announces the VIP, and returns the nodes that announce
// it; until then it says what it waits for, by name. An address LB-IPAM wrote is not yet a reachable VIP: the
// announcer may be switched off, lack its RBAC or kube-proxy replacement, or select no node.
//
// Which nodes may announce is read from the objects as applied (the L2 policy's or the BGP cluster config's node
// selector), so that this check and what Cilium is told cannot differ.
func (a *actuator) waitForAnnouncement(ctx context.Context, objs *resources.Objects) ([]string, error) {
	var (
		announcers []string
		waiting    string
		readErr    error
	)
	err := wait.PollUntilContextTimeout(ctx, announcementPoll, a.ingressWait, true, func(ctx context.Context) (bool, error) {
		var (
			nodes []string
			what  string
			err   error
		)
		if objs.L2Policy != nil {
			nodes, what, err = a.l2Announcer(ctx, objs.Service, objs.L2Policy.Spec.NodeSelector)
		} else {
			nodes, what, err = a.bgpAnnouncers(ctx, objs.ClusterConfig)
		}
		if err != nil {
			// A failed read says nothing new: look again, and keep what the last complete look found. A read cut off
			// by the wait's deadline fails with the context's error, or, when client-go's rate limiter sees that its
			// wait would pass the deadline, with the limiter's own (rest/request.go tryThrottleWithInfo), which is
			// not the context's.
			readErr = err
			return false, nil
		}
		announcers, waiting, readErr = nodes, what, nil
		return len(announcers) > 0, nil
	})
	if len(announcers) > 0 {
		return announcers, nil
	}
	if err != nil && !wait.Interrupted(err) {
		return nil, err
	}
	if waiting == "" && readErr != nil {
		return nil, readErr
	}
	return nil, &reconcilerutils.RequeueAfterError{RequeueAfter: 2 * time.Second, Cause: fmt.Errorf("waiting for Cilium to announce the VIP: %s", waiting)}
}

// l2Announcer is the node that holds and renews the Service's L2 announcement lease, if the L2 policy's node selector
// selects it.
func (a *actuator) l2Announcer(ctx context.Context, svc *corev1.Service, nodeSelector *slimv1.LabelSelector) ([]string, string, error) {
	lease := &coordinationv1.Lease{}
	key := client.ObjectKey{Namespace: cilium.Namespace, Name: cilium.L2AnnouncementLeaseName(svc.Namespace, svc.Name)}
	if err := a.reader.Get(ctx, key, lease); err != nil {
		if client.IgnoreNotFound(err) == nil {
			return nil, fmt.Sprintf("no node took lease %s (are Cilium's agents running with enable-l2-announcements, and does the L2 policy select a node?)", key), nil
		}
		return nil, "", err
	}
	holder := ptr.Deref(lease.Spec.HolderIdentity, "")
	if holder == "" {
		return nil, fmt.Sprintf("lease %s has no holder", key), nil
	}
	if !fresh(lease, time.Now()) {
		return nil, fmt.Sprintf("lease %s of %s is not renewed (its agent may be down)", key, holder), nil
	}
	node := &corev1.Node{}
	if err := a.client.Get(ctx, client.ObjectKey{Name: holder}, node); err != nil {
		return nil, "", fmt.Errorf("reading node %s, which holds lease %s: %w", holder, key, err)
	}
	selector, err := slimv1.LabelSelectorAsSelector(nodeSelector)
	if err != nil {
		return nil, "", err
	}
	if !selector.Matches(labels.Set(node.Labels)) {
		return nil, fmt.Sprintf("lease %s is held by %s, which the L2 policy does not select (%s)", key, holder, selector), nil
	}
	return []string{holder}, "", nil
}

// fresh says whether the lease's holder renewed it within its duration.
func fresh(lease *coordinationv1.Lease, now time.Time) bool {
	if lease.Spec.RenewTime == nil || lease.Spec.LeaseDurationSeconds == nil {
		return false
	}
	return now.Before(lease.Spec.RenewTime.Add(time.Duration(*lease.Spec.LeaseDurationSeconds) * time.Second))
}

// bgpEstablished is the peering state of an established BGP session (CiliumBGPNodeConfig status, from GoBGP's
// session states).
const bgpEstablished = "established"

// bgpAnnouncers are the nodes the exposure's cluster config selects (nil: a reused cluster config, which selects its
// own nodes) whose CiliumBGPNodeConfig shows an established session with a peer that advertises routes, where the
// status counts them.
func (a *actuator) bgpAnnouncers(ctx context.Context, clusterConfig *ciliumv2.CiliumBGPClusterConfig) ([]string, string, error) {
	list := &ciliumv2.CiliumBGPNodeConfigList{}
	if err := a.reader.List(ctx, list); err != nil {
		return nil, "", fmt.Errorf("listing CiliumBGPNodeConfigs: %w", err)
	}
	reused := clusterConfig == nil
	var selector slimlabels.Selector
	if !reused {
		var err error
		if selector, err = slimv1.LabelSelectorAsSelector(clusterConfig.Spec.NodeSelector); err != nil {
			return nil, "", err
		}
	}
	var announcers, seen []string
	for _, nc := range list.Items {
		node := &corev1.Node{}
		if err := a.client.Get(ctx, client.ObjectKey{Name: nc.Name}, node); client.IgnoreNotFound(err) != nil {
			return nil, "", err
		}
		// A reused cluster config selects its own nodes.
		if !reused && !selector.Matches(labels.Set(node.Labels)) {
			continue
		}
		seen = append(seen, nc.Name)
		for _, instance := range nc.Status.BGPInstances {
			if !reused && instance.Name != resources.BGPInstanceName {
				continue
			}
			if slices.ContainsFunc(instance.PeerStatuses, advertising) {
				announcers = append(announcers, nc.Name)
				break
			}
		}
	}
	if len(announcers) > 0 {
		slices.Sort(announcers)
		return announcers, "", nil
	}
	if len(seen) == 0 {
		return nil, "no CiliumBGPNodeConfig of a node the BGP configuration selects (is Cilium's BGP control plane running?)", nil
	}
	slices.Sort(seen)
	return nil, fmt.Sprintf("no established BGP session that advertises routes in the CiliumBGPNodeConfigs of %s", strings.Join(seen, ", ")), nil
}

// advertising: the session is established and, where the status counts routes, advertises some.
func advertising(peer ciliumv2.CiliumBGPNodePeerStatus) bool {
	if ptr.Deref(peer.PeeringState, "") != bgpEstablished {
		return false
	}
	if len(peer.RouteCount) == 0 {
		return true
	}
	return slices.ContainsFunc(peer.RouteCount, func(c ciliumv2.BGPFamilyRouteCount) bool { return c.Advertised != nil && *c.Advertised > 0 })
}

// ingressIPs lists the ingress addresses.
func ingressIPs(ingress []corev1.LoadBalancerIngress) string {
	ips := make([]string, 0, len(ingress))
	for _, in := range ingress {
		ips = append(ips, in.IP)
	}
	return strings.Join(ips, ",")
}
