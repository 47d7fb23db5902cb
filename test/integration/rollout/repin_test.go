// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package rollout_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/apiserverendpoints"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/cilium"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/controller/repin"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/ciliumchart"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/resourcemanager"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/testenv"
)

// installCilium delivers networking-cilium's chart as networking-cilium does (a ManagedResource of the shoot's resource
// manager), so that kube-controller-manager creates Cilium's pods through the webhook; it takes them out again when the
// test ends.
func installCilium(t *testing.T) *ciliumchart.Objects {
	t.Helper()
	ctx := context.Background()
	rendered, err := ciliumchart.RenderGardener(ciliumchart.GardenerVersion, ciliumchart.GardenerValues(ciliumchart.GardenerVersion))
	if err != nil {
		t.Fatal(err)
	}
	// Without the chart's Cilium objects (its CiliumNetworkPolicies), which Gardener's shoot serializer cannot encode
	// here and which no pod needs to start.
	objs := slices.DeleteFunc(slices.Clone(rendered.All), func(obj client.Object) bool {
		gvk, err := apiutil.GVKForObject(obj, env.Client.Scheme())
		return err != nil || gvk.Group == "cilium.io"
	})
	data, err := resourcemanager.Serialize(objs...)
	if err != nil {
		t.Fatal(err)
	}
	rm, err := resourcemanager.New(env.Config, env.Client, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := rm.DeployForShoot(ctx, cilium.ManagedResource.Namespace, cilium.ManagedResource.Name, "extension-networking-cilium", data); err != nil {
		t.Fatalf("the resource manager applying networking-cilium's chart: %v", err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		for _, w := range rendered.Workloads() {
			_ = env.Client.Delete(ctx, w)
		}
		_ = env.Client.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(cilium.Namespace), client.HasLabels{cilium.LabelKeyApp}, client.GracePeriodSeconds(0))
		_ = env.Client.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(cilium.Namespace), client.HasLabels{cilium.LabelKeyOperator}, client.GracePeriodSeconds(0))
	})
	return rendered
}

// ciliumPodsPinned waits until every node runs a Ready agent and every Cilium pod is Current against the nodes as
// they are (repin.Classify on the pods as kube-apiserver stores them).
func ciliumPodsPinned(t *testing.T, nodes int) {
	t.Helper()
	var last string
	if err := testenv.WaitFor(context.Background(), 3*time.Minute, func(ctx context.Context) (bool, error) {
		nodeList := &corev1.NodeList{}
		if err := env.Client.List(ctx, nodeList); err != nil {
			return false, err
		}
		members := apiserverendpoints.FromNodes(nodeList.Items)
		cpNodes := apiserverendpoints.ControlPlaneNodes(nodeList.Items)
		pods := &corev1.PodList{}
		if err := env.Client.List(ctx, pods, client.InNamespace(cilium.Namespace)); err != nil {
			return false, err
		}
		agents, notCurrent := 0, []string{}
		for i := range pods.Items {
			p := &pods.Items[i]
			if !cilium.IsWorkload(p.Labels) || p.DeletionTimestamp != nil || p.Spec.NodeName == "" {
				continue
			}
			if p.Labels[cilium.LabelKeyApp] == cilium.LabelValueAgent && p.Status.Phase == corev1.PodRunning {
				agents++
			}
			if c := repin.Classify(p, members, cpNodes); c != repin.Current {
				notCurrent = append(notCurrent, fmt.Sprintf("%s on %s: %s", p.Name, p.Spec.NodeName, c))
			}
		}
		last = fmt.Sprintf("%d running agents, members %v, not current: %v", agents, members.Addresses, notCurrent)
		return agents == nodes && len(notCurrent) == 0, nil
	}); err != nil {
		t.Fatalf("Cilium's pods are not all pinned to the current control-plane members: %v; last: %s\n%s", err, last, logs())
	}
}

// TestStrandedCiliumPodsRecreated: a control-plane node's InternalIP changes (a DHCP lease that moved, or the node
// rebuilt at a new address): the agents off the control plane and the operator were admitted with the old address in
// their hostAliases, which kubelet wrote into their hosts files at start; they are stranded. The extension recreates
// them, with no manual step, and their DaemonSet and ReplicaSet's new pods are pinned to the new address. The
// control-plane node's own agent (localhost) is left alone. Then the control-plane node is replaced by one at another
// address, and every pod follows again.
func TestStrandedCiliumPodsRecreated(t *testing.T) {
	ctx := context.Background()
	registerControlPlaneNode(t, "cp-r", "10.0.1.40")
	for i, name := range []string{"worker-r0", "worker-r1"} {
		registerWorker(t, name, fmt.Sprintf("10.0.2.4%d", i))
	}
	installCilium(t)
	ciliumPodsPinned(t, 3)
	controlPlaneAgent := agentOn(t, "cp-r")

	if err := env.SetInternalIP(ctx, "cp-r", "10.0.1.41"); err != nil {
		t.Fatal(err)
	}
	moved := time.Now()
	ciliumPodsPinned(t, 3)
	t.Logf("every Cilium pod pinned to the new address %s after it changed", time.Since(moved).Round(100*time.Millisecond))
	if got := agentOn(t, "cp-r"); got != controlPlaneAgent {
		t.Errorf("the control-plane node's agent %s, which reaches its own kube-apiserver, was recreated as %s", controlPlaneAgent, got)
	}
	// The control-plane node is replaced by one at another address, as `gardenadm restore` onto a new node does.
	registerControlPlaneNode(t, "cp-r-new", "10.0.1.42")
	if err := kubelets.Remove(ctx, "cp-r"); err != nil {
		t.Fatal(err)
	}
	replaced := time.Now()
	ciliumPodsPinned(t, 3)
	t.Logf("every Cilium pod pinned to the replacement node %s after it replaced the old one", time.Since(replaced).Round(100*time.Millisecond))

	if err := testenv.WaitForEvent(ctx, env.Client, cilium.Namespace, func(e corev1.Event) bool {
		return e.Reason == repin.EventReason && e.InvolvedObject.Kind == "DaemonSet"
	}); err != nil {
		t.Errorf("no %s event on the agents' DaemonSet: %v", repin.EventReason, err)
	}
}

// agentOn is the name of the agent pod on node.
func agentOn(t *testing.T, node string) string {
	t.Helper()
	for _, p := range must(pods(context.Background(), map[string]string{cilium.LabelKeyApp: cilium.LabelValueAgent}, cilium.Namespace)) {
		if p.Spec.NodeName == node && p.DeletionTimestamp == nil {
			return p.Name
		}
	}
	return ""
}
