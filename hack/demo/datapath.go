// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	extensionsv1alpha1 "github.com/gardener/gardener/pkg/apis/extensions/v1alpha1"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/cilium"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/ciliumchart"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/ciliumnodes"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/ciliumoperator"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/fixtures"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/frr"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/podrun"
)

// datapath runs Cilium's real agents on network-namespace nodes from the pods the webhook admitted (test/framework/ciliumnodes),
// shows each agent's state and the kube-apiserver it is connected to, exposes kube-apiserver on the VIP with the
// chart's operator, shows who announces it and an HTTPS answer through it, and kills the announcing node; then, with
// FRR installed, it switches the exposure to BGP (bgp).
func (d *demo) datapath(ctx context.Context, chart string) ([]string, error) {
	if err := ciliumnodes.Available(); err != nil {
		fmt.Printf("(skipped: %v)\n", err)
		return nil, nil
	}
	agents := ciliumnodes.Agents{Chart: ciliumnodes.GardenerChart}
	if chart == ciliumchart.GardenerVersion {
		agents.Chart = ciliumnodes.UpstreamChart
	}
	// The chart's operator takes over the exposure's LB-IPAM and announcement policy from the one on the host.
	d.operator.Stop(ctx)
	ciliumoperator.FreeLease(ctx, d.env.Client)
	// The agent pods created above stood in for the DaemonSet controller's; from here Kubernetes' own makes them, and
	// would adopt those (they match its selector) only to delete them.
	deleteAgentPods := func() error {
		return d.env.Client.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(cilium.Namespace),
			client.MatchingLabels{cilium.LabelKeyApp: cilium.LabelValueAgent}, client.GracePeriodSeconds(0))
	}
	if err := deleteAgentPods(); err != nil {
		return nil, err
	}
	// What the nodes' kubelet did (the operator restarted after kube-apiserver's restart, pods deleted) goes to a file.
	kubeletLog, err := os.Create(filepath.Join(d.env.Dir, "kubelet.log"))
	if err != nil {
		return nil, err
	}
	defer kubeletLog.Close()
	cluster, err := ciliumnodes.New(ctx, d.env, "cdemo"+strconv.Itoa(os.Getpid()), ciliumnodes.Options{ExtensionPods: true, KubeletLog: kubeletLog})
	if err != nil {
		return nil, err
	}
	defer cluster.Close()
	// The DaemonSet controller starts with the extension's own pods, and made the agents' pods while none of those was
	// ready to answer the webhook (failurePolicy Ignore): they carry only the DaemonSet's pinning, the control-plane
	// nodes' addresses, as on any node, and no localhost. In a running shoot the extension's rollout keeps a replica
	// ready; here they are made again now that the webhook answers.
	if err := deleteAgentPods(); err != nil {
		return nil, err
	}
	step("Starting the agents of %s on %s, each from the pod the webhook admitted for its node (Cilium %s; each compiles "+
		"its BPF programs with clang)", agents.Chart, strings.Join(ciliumnodes.NodeNames, ", "), ciliumchart.GardenerVersion)
	start := time.Now()
	if _, err := cluster.Run(ctx, agents); err != nil {
		return nil, err
	}
	fmt.Printf("\nall agents ready after %s\n\n", time.Since(start).Round(time.Second))
	problems, err := agentsTable(ctx, cluster)
	if err != nil {
		return nil, err
	}
	exp, p, err := vipL2(ctx, cluster)
	if err != nil {
		return nil, err
	}
	problems = append(problems, p...)
	if err := failover(ctx, cluster, exp); err != nil {
		return nil, err
	}
	p, err = restart(ctx, cluster, agents)
	if err != nil {
		return nil, err
	}
	problems = append(problems, p...)
	if why := frr.Available(); why != "" {
		fmt.Printf("\n(BGP skipped: %s)\n", why)
		return problems, nil
	}
	p, err = bgp(ctx, cluster, exp, agents)
	return append(problems, p...), err
}

// agentsTable shows each agent's state, the kube-apiserver it is connected to and the packets it sent to the ClusterIP
// and the VIP, and says what is wrong among them.
func agentsTable(ctx context.Context, cluster *ciliumnodes.Cluster) ([]string, error) {
	var problems []string
	table := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(table, "NODE\tAGENT\tKUBERNETES\tKUBE-PROXY REPLACEMENT\tCONNECTED TO\tPACKETS TO CLUSTERIP / VIP")
	for _, n := range cluster.Nodes() {
		status, err := n.Status(ctx)
		if err != nil {
			return nil, err
		}
		peers, err := n.APIServerPeers()
		if err != nil {
			return nil, err
		}
		attempts, err := n.Attempts()
		if err != nil {
			return nil, err
		}
		// A control-plane node's agent reaches its own kube-apiserver at localhost, a worker's a control-plane node's.
		if local := slices.Equal(peers, []string{podrun.LocalAPIServer}); local != n.ControlPlane || len(peers) == 0 {
			problems = append(problems, fmt.Sprintf("the agent on %s is connected to %v", n.Name, peers))
		}
		var agent, k8s, kpr string
		if status.Cilium != nil {
			agent = status.Cilium.State
		}
		if status.Kubernetes != nil {
			k8s = status.Kubernetes.State + " " + status.Kubernetes.Msg
		}
		if status.KubeProxyReplacement != nil {
			kpr = status.KubeProxyReplacement.Mode
		}
		var counts []string
		for _, addr := range slices.Sorted(maps.Keys(attempts)) {
			counts = append(counts, strconv.Itoa(attempts[addr]))
			if attempts[addr] > 0 {
				problems = append(problems, fmt.Sprintf("%s sent %d packets to %s", n.Name, attempts[addr], addr))
			}
		}
		fmt.Fprintf(table, "%s\t%s\t%s\t%s\t%s\t%s\n", n.Name, agent, k8s, kpr, strings.Join(peers, ","), strings.Join(counts, " / "))
	}
	_ = table.Flush()
	return problems, nil
}

// vipL2 exposes kube-apiserver on the VIP with L2 announcements, shows who announces it and an HTTPS answer through
// it, and says what is wrong.
func vipL2(ctx context.Context, cluster *ciliumnodes.Cluster) (*extensionsv1alpha1.SelfHostedShootExposure, []string, error) {
	var problems []string
	step("Exposing kube-apiserver on the VIP with the chart's operator (on %s) and the agents' L2 announcements", ciliumnodes.OperatorNode)
	exp, err := cluster.L2().Expose(ctx)
	if err != nil {
		return nil, nil, err
	}
	holder, err := cluster.L2().WaitForLeaseHolder(ctx, exp, "")
	if err != nil {
		return nil, nil, err
	}
	macs, err := cluster.L2().WaitForARP(ctx, func(macs []string) bool { return len(macs) > 0 })
	if err != nil {
		return nil, nil, err
	}
	holderMAC, err := cluster.Node(holder).MAC()
	if err != nil {
		return nil, nil, err
	}
	fmt.Printf("\nlease holder %s (eth0 %s); ARP for %s from the client %s answered by %v\n", holder, holderMAC, fixtures.ExposureVIP, ciliumnodes.ClientIP, macs)
	if !slices.Equal(macs, []string{holderMAC}) {
		problems = append(problems, fmt.Sprintf("ARP for the VIP answered by %v, want only the lease holder's %s", macs, holderMAC))
	}
	body, err := cluster.L2().ReadyzThroughVIP(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("HTTPS through the VIP: %w", err)
	}
	fmt.Printf("GET https://%s:443/readyz from the client, certificate verified under %s: %s\n\n", fixtures.ExposureVIP, ciliumchart.ExternalHost, body)
	return exp, problems, nil
}

// failover kills the announcing node and shows how long the VIP took to answer again, and who took the lease.
func failover(ctx context.Context, cluster *ciliumnodes.Cluster, exp *extensionsv1alpha1.SelfHostedShootExposure) error {
	holder, err := cluster.L2().LeaseHolder(ctx, exp)
	if err != nil {
		return err
	}
	step("Killing %s, the announcing node (its link goes down, its agent ends without handing over the lease)", holder)
	f, err := cluster.L2().FailOver(ctx, exp, ciliumnodes.LinkDown)
	if err != nil {
		return err
	}
	fmt.Printf("\n%s took the lease; a live node answers ARP for the VIP after %s, HTTPS through the VIP works again after %s "+
		"(lease duration %s; kube-vip documents about 3s, Cilium's default lease is 15s)\n",
		f.To, f.ARP.Round(10*time.Millisecond), f.HTTPS.Round(10*time.Millisecond), f.Lease)
	if f.HandedOver != "" {
		fmt.Printf("the extension handed the lease over, event HandedOver on the exposure: %s\n", f.HandedOver)
	}
	fmt.Printf("the lease's writes: %s %s\n", f.From, f.LeaseMove)
	fmt.Println()
	fmt.Println("(HTTPS may work again before ARP moves: the bridge floods frames for the dead node's MAC to every port, and the " +
		"other nodes' Cilium load-balances them; see docs/datapath.md)")
	return nil
}

// bgp switches the exposure to announcement BGP with the top-of-rack router of docs/bgp.md, shows its sessions with
// the control-plane nodes, its route to the VIP with a next hop per node, and HTTPS through the VIP from the client
// network behind it.
func bgp(ctx context.Context, cluster *ciliumnodes.Cluster, exp *extensionsv1alpha1.SelfHostedShootExposure, agents ciliumnodes.Agents) ([]string, error) {
	step("Switching the exposure to announcement BGP: FRR as the top-of-rack router tor-a (%s, AS %d) with docs/bgp.md's "+
		"configuration, the client network %s behind it; the control-plane nodes peer as AS %d",
		ciliumnodes.RouterIP, ciliumnodes.RouterASN, ciliumnodes.RemoteNetwork, ciliumnodes.NodesASN)
	// The node killed above comes back with its agent, and gets its route through the router with the others.
	if _, err := cluster.Run(ctx, agents); err != nil {
		return nil, err
	}
	router, err := cluster.BGP().StartRouter(ctx)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	if err := cluster.BGP().Announce(ctx, exp, ciliumnodes.ExposureConfigBGP); err != nil {
		return nil, err
	}
	fmt.Printf("\nthe exposure is Succeeded again after %s (it waits until an agent's BGP session advertises the VIP)\n", time.Since(start).Round(100*time.Millisecond))
	if err := router.WaitForEveryNextHop(ctx); err != nil {
		return nil, err
	}
	var problems []string
	neighbors, err := router.Neighbors(ctx)
	if err != nil {
		return nil, err
	}
	table := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(table, "\nROUTER'S NEIGHBOUR\tSTATE\tPREFIXES RECEIVED")
	var established []string
	for _, n := range neighbors {
		fmt.Fprintf(table, "%s\t%s\t%d\n", n.Address, n.State, n.PrefixesReceived)
		if n.State == "Established" {
			established = append(established, n.Address)
		}
	}
	_ = table.Flush()
	slices.Sort(established)
	if !slices.Equal(established, fixtures.ControlPlaneIPs) {
		problems = append(problems, fmt.Sprintf("the router has sessions with %v, want the control-plane nodes %v", established, fixtures.ControlPlaneIPs))
	}
	hops, err := router.NextHops(fixtures.ExposureVIP)
	if err != nil {
		return nil, err
	}
	fmt.Printf("\nthe router's kernel routes %s via %s (one next hop per control-plane node, ECMP)\n", fixtures.ExposureVIP, strings.Join(hops, ", "))
	took, _, err := cluster.BGP().ServedViaEveryNode(ctx, router)
	if err != nil {
		problems = append(problems, err.Error())
	} else {
		fmt.Printf("HTTPS through the VIP from %s behind the router worked via every control-plane node (after %s)\n", ciliumnodes.RemoteClientIP, took.Round(100*time.Millisecond))
	}
	sport := router.NextSourcePort()
	body, err := cluster.BGP().ReadyzFromRemote(ctx, router, sport)
	if err != nil {
		return nil, fmt.Errorf("HTTPS through the VIP from behind the router: %w", err)
	}
	fmt.Printf("GET https://%s:443/readyz from %s, routed via %s, certificate verified under %s: %s\n", fixtures.ExposureVIP, ciliumnodes.RemoteClientIP, router.Hop(ctx, sport), ciliumchart.ExternalHost, body)
	return problems, nil
}
