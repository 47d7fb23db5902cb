// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package datapath

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gardener/gardener/pkg/utils/kubernetes/health"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/apiserverendpoints"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/cilium"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/controller/repin"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/ciliumnodes"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/fixtures"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/testenv"
)

// repinBound is how long a worker's agent may take, from the address change, to be connected to a current
// control-plane member again: the extension sees the Nodes change, probes and deletes the pod; kubelet stops the agent
// (the chart's 1 s grace period); the DaemonSet controller creates the replacement through the webhook, the scheduler
// binds it, and the new agent starts. Measured by `make bench`; a bound, not the expected time.
const repinBound = 45 * time.Second

// TestControlPlaneNodesAtNewAddresses: the control-plane nodes change their InternalIPs under running agents, as a DHCP
// lease that moved or `gardenadm restore` onto nodes at new addresses does. The worker's agent was admitted with the
// old addresses in its hostAliases, which kubelet wrote into its hosts file when it started.
//   - The control-plane node of the first address of the worker's pod moves (degraded): the extension recreates the
//     pod, and the new agent is connected to a current member.
//   - Every control-plane node moves: no address of the pod is a member (stranded); the extension recreates it at once
//     and the new agent is connected to a current member, within repinBound.
//   - The same with re-pinning switched off (--disable-controllers=cilium-repin): the agent stays stranded, on the same
//     pod, for all of repinBound.
//
// Kubernetes' DaemonSet controller and scheduler make the replacements from the agent DaemonSet of upstream's chart
// installed on the newest line's lane (which balances the lanes' times); the harness is the nodes' kubelet (Envoy's
// DaemonSet, which cannot run here, is left out).
func TestControlPlaneNodesAtNewAddresses(t *testing.T) {
	const worker = "worker-0"
	ctx := context.Background()
	l := newestLane
	l.hold(t)
	showExtensionLogsOnFailure(t, l)
	if err := l.run(ctx, ciliumnodes.Agents{}); err != nil {
		t.Fatal(err)
	}
	repinOff := false
	t.Cleanup(func() { restoreAddresses(t, l, worker, repinOff) })
	pod, err := l.cluster.Repins().RunningPod(ctx, worker, repinBound)
	if err != nil {
		t.Fatal(err)
	}
	connected(t, l, worker)

	// The first address of the worker's pod moves.
	first := l.cluster.NodeByIP(pod.Spec.HostAliases[0].IP)
	if first == nil {
		t.Fatalf("the first hostAlias of %s, %s, is no node's address", pod.Name, pod.Spec.HostAliases[0].IP)
	}
	t.Logf("%s, the first address of %s (hostAliases %v), moves", first.Name, pod.Name, pod.Spec.HostAliases)
	moved := moveNodes(t, l, map[string]string{first.Name: "10.0.1.20"})
	pod = repinned(t, l, worker, pod.UID, moved)

	// Every control-plane node moves.
	moved = moveNodes(t, l, map[string]string{"cp-0": "10.0.1.30", "cp-1": "10.0.1.31", "cp-2": "10.0.1.32"})
	pod = repinned(t, l, worker, pod.UID, moved)
	if err := testenv.WaitForEvent(ctx, l.env.Client, cilium.Namespace, func(e corev1.Event) bool {
		return e.Reason == repin.EventReason && e.InvolvedObject.Kind == "DaemonSet"
	}); err != nil {
		t.Errorf("no %s event on the agents' DaemonSet: %v", repin.EventReason, err)
	}

	// Every control-plane node moves again, with re-pinning off.
	repinOff = true
	if err := l.cluster.ExtensionArgs(ctx, "--disable-controllers="+repin.ControllerName); err != nil {
		t.Fatal(err)
	}
	moved = moveNodes(t, l, map[string]string{"cp-0": "10.0.1.40", "cp-1": "10.0.1.41", "cp-2": "10.0.1.42"})
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, repinBound, true, func(context.Context) (bool, error) {
		_, err := l.cluster.Reconnects().ConnectedTo(worker)
		return err == nil || l.cluster.Repins().AgentPod(worker).UID != pod.UID, nil
	})
	if err == nil {
		t.Fatalf("without re-pinning, the agent on %s got over the move of every control-plane node: pod %s, connected: %v",
			worker, l.cluster.Repins().AgentPod(worker).Name, peers(l, worker))
	}
	t.Logf("without re-pinning, the agent on %s was still stranded %s after every control-plane node moved: pod %s, hostAliases %v, connected to %v",
		worker, time.Since(moved).Round(time.Second), pod.Name, pod.Spec.HostAliases, peers(l, worker))
}

// connected waits until the worker's agent is connected to a control-plane node.
func connected(t *testing.T, l *lane, worker string) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, repinBound, true, func(context.Context) (bool, error) {
		_, err := l.cluster.Reconnects().ConnectedTo(worker)
		return err == nil, nil
	}); err != nil {
		t.Fatalf("the agent on %s is connected to no control-plane node: %v: %v", worker, peers(l, worker), err)
	}
}

// moveNodes moves the nodes (name → new address) one after the other, and returns when the last one had moved.
func moveNodes(t *testing.T, l *lane, to map[string]string) time.Time {
	t.Helper()
	for _, name := range slices.Sorted(maps.Keys(to)) {
		if err := l.cluster.Repins().MoveNode(context.Background(), name, to[name]); err != nil {
			t.Fatal(err)
		}
	}
	return time.Now()
}

// repinned waits until the worker runs a pod other than old, pinned to exactly the control-plane nodes' current
// addresses, whose agent is connected to one of them; it returns that pod.
func repinned(t *testing.T, l *lane, worker string, old types.UID, since time.Time) *corev1.Pod {
	t.Helper()
	r, err := l.cluster.Repins().WaitForRepin(context.Background(), worker, old, since, repinBound)
	if err != nil {
		t.Fatalf("%v\n%s", err, ciliumPods(l))
	}
	var members []string
	for _, n := range l.cluster.Nodes() {
		if n.ControlPlane {
			members = append(members, n.IP)
		}
	}
	aliases := sortedAliases(r.Pod)
	if !slices.Equal(aliases, slices.Sorted(slices.Values(members))) {
		t.Errorf("the new pod %s has hostAliases %v, want the control-plane nodes' current addresses %v", r.Pod.Name, aliases, members)
	}
	t.Logf("the agent on %s was connected to %s (%s) %s after the move, from the new pod %s with hostAliases %v",
		worker, r.To.Name, r.To.IP, r.After.Round(100*time.Millisecond), r.Pod.Name, aliases)
	return r.Pod
}

// restoreAddresses gives the control-plane nodes their fixture addresses back, with re-pinning on, and waits until the
// worker's agent runs from a pod pinned to them and is connected, for the tests that follow.
func restoreAddresses(t *testing.T, l *lane, worker string, restartExtension bool) {
	ctx := context.Background()
	to := map[string]string{}
	for _, n := range fixtures.Nodes() {
		if node := l.cluster.Node(n.Name); node != nil && node.IP != n.Status.Addresses[0].Address {
			to[n.Name] = n.Status.Addresses[0].Address
		}
	}
	moveNodes(t, l, to)
	if restartExtension {
		if err := l.cluster.ExtensionArgs(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, repinBound, true, func(context.Context) (bool, error) {
		pod := l.cluster.Repins().AgentPod(worker)
		if pod == nil || !slices.Equal(sortedAliases(pod), fixtures.ControlPlaneIPs) {
			return false, nil
		}
		_, err := l.cluster.Reconnects().ConnectedTo(worker)
		return err == nil, nil
	}); err != nil {
		t.Errorf("after the control-plane nodes got their addresses back, the agent on %s is not pinned to them and connected: %v, %s", worker, err, peers(l, worker))
	}
}

// ciliumPods lists Cilium's pods as the re-pinning controller judges them, for a failing test.
func ciliumPods(l *lane) string {
	ctx := context.Background()
	nodes, pods := &corev1.NodeList{}, &corev1.PodList{}
	if err := l.env.Client.List(ctx, nodes); err != nil {
		return err.Error()
	}
	if err := l.env.Client.List(ctx, pods, client.InNamespace(cilium.Namespace)); err != nil {
		return err.Error()
	}
	members := apiserverendpoints.FromNodes(nodes.Items)
	var out strings.Builder
	fmt.Fprintf(&out, "control-plane members %v; Cilium's pods:\n", members.Addresses)
	for i := range pods.Items {
		p := &pods.Items[i]
		if !cilium.IsWorkload(p.Labels) {
			continue
		}
		fmt.Fprintf(&out, "  %s on %q: %s, ready %v, age %s, deleting %v, %s\n", p.Name, p.Spec.NodeName, p.Status.Phase, health.IsPodReady(p),
			time.Since(p.CreationTimestamp.Time).Round(time.Second), p.DeletionTimestamp != nil,
			repin.Classify(p, members, apiserverendpoints.ControlPlaneNodes(nodes.Items)))
	}
	return out.String()
}

// sortedAliases are the addresses of pod's hostAliases, sorted.
func sortedAliases(pod *corev1.Pod) []string {
	var out []string
	for _, a := range pod.Spec.HostAliases {
		out = append(out, a.IP)
	}
	slices.Sort(out)
	return out
}

func peers(l *lane, name string) string {
	p, err := l.cluster.Node(name).APIServerPeers()
	return fmt.Sprintf("%v (%v)", p, err)
}
