// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package ciliumnodes

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os/exec"
	"slices"
	"strings"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	extensionsv1alpha1 "github.com/gardener/gardener/pkg/apis/extensions/v1alpha1"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/cilium"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/selfhosted"
)

// Snapshot is what a case on a shared cluster must leave as it found it, by what it is of: each node's links,
// addresses and routes, the switch's ports, the Nodes' labels, taints and addresses, the exposure's spec, the Shoot's
// networking providerConfig, the leases of Cilium's namespace, and how many agents ended by themselves.
type Snapshot map[string]string

// Snapshot takes the cluster's snapshot. Take it with the agents settled (Run): one that is still starting changes
// its node's links.
func (c *Cluster) Snapshot(ctx context.Context) (Snapshot, error) {
	s := Snapshot{}
	exits := 0
	for _, n := range c.Nodes() {
		for what, args := range map[string][]string{
			"links":     {"-br", "link"},
			"addresses": {"-br", "-4", "addr"},
			"routes":    {"-4", "route", "show", "table", "main"},
		} {
			out, err := exec.Command("ip", append([]string{"-n", n.netns.Name()}, args...)...).Output()
			if err != nil {
				return nil, fmt.Errorf("%s's %s: %w", n.Name, what, err)
			}
			s[n.Name+"'s "+what] = string(out)
		}
		exits += n.exits()
	}
	s["agents that ended by themselves"] = fmt.Sprint(exits)
	ports, err := c.lan.sw.Command("bridge", "link").Output()
	if err != nil {
		return nil, fmt.Errorf("the switch's ports: %w", err)
	}
	s["the switch's ports"] = string(ports)
	if err := c.snapshotObjects(ctx, s); err != nil {
		return nil, err
	}
	return s, nil
}

// snapshotObjects adds the objects to s: the Nodes, the exposure, the Shoot and the leases.
func (c *Cluster) snapshotObjects(ctx context.Context, s Snapshot) error {
	nodes := &corev1.NodeList{}
	if err := c.env.Client.List(ctx, nodes); err != nil {
		return err
	}
	for _, n := range nodes.Items {
		// Not the status conditions, the annotations and Cilium's taints: the nodes' kubelet, the agents and
		// cilium-operator (which removes node.cilium.io/agent-not-ready once the node's agent is ready) write them as
		// they run.
		taints := slices.DeleteFunc(n.Spec.Taints, func(t corev1.Taint) bool { return strings.HasPrefix(t.Key, "node.cilium.io/") })
		raw, err := json.Marshal(map[string]any{"labels": n.Labels, "taints": taints, "addresses": n.Status.Addresses})
		if err != nil {
			return err
		}
		s["Node "+n.Name] = string(raw)
	}
	exposures := &extensionsv1alpha1.SelfHostedShootExposureList{}
	if err := c.env.Client.List(ctx, exposures); err != nil {
		return err
	}
	for _, e := range exposures.Items {
		raw, err := json.Marshal(e.Spec)
		if err != nil {
			return err
		}
		s["exposure "+e.Namespace+"/"+e.Name] = string(raw)
	}
	cluster := &extensionsv1alpha1.Cluster{}
	if err := c.env.Client.Get(ctx, client.ObjectKey{Name: selfhosted.ClusterName}, cluster); err != nil {
		return err
	}
	s["the Cluster's shoot"] = string(cluster.Spec.Shoot.Raw)
	leases := &coordinationv1.LeaseList{}
	if err := c.env.Client.List(ctx, leases, client.InNamespace(cilium.Namespace)); err != nil {
		return err
	}
	var names []string
	for _, l := range leases.Items {
		names = append(names, l.Name)
	}
	slices.Sort(names)
	s["the leases of "+cilium.Namespace] = strings.Join(names, " ")
	return nil
}

// Changes are what differs in after from before, one line each.
func (before Snapshot) Changes(after Snapshot) []string {
	keys := slices.Collect(maps.Keys(before))
	for k := range after {
		if _, ok := before[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	var out []string
	for _, what := range keys {
		if before[what] != after[what] {
			out = append(out, fmt.Sprintf("%s: was\n%s\nnow\n%s", what, before[what], after[what]))
		}
	}
	return out
}
