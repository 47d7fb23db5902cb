// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package hostileworker_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/testenv"
)

// TestRealWritersStillWrite: what kubelet, gardener-node-agent, Cilium's agent and operator, node-problem-detector,
// Gardener's resource manager, gardenlet, kube-controller-manager's node controller and a cluster admin write on
// Nodes passes the chart's policies, each with its own identity and RBAC, as a dry run.
func TestRealWritersStillWrite(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		id   testenv.Identity
		node string
		w    write
	}{
		{"kubelet reports a new address of its control-plane node", testenv.Kubelet("cp-0"), "cp-0", write{statusPatch: true, patch: `{"status":{"addresses":[{"type":"InternalIP","address":"10.0.1.20"}]}}`}},
		{"kubelet reports its node ready", testenv.Kubelet("worker-0"), "worker-0", write{statusPatch: true, patch: kubeletReady}},
		{"node-agent labels its node control-plane", nodeAgent("cp-0"), "cp-0", write{patch: `{"metadata":{"labels":{"node-role.kubernetes.io/control-plane":"","worker.gardener.cloud/kubernetes-version":"1.36.3"}}}`}},
		{"node-agent restores its node's address", nodeAgent("cp-0"), "cp-0", write{statusPatch: true, patch: `{"status":{"addresses":[{"type":"InternalIP","address":"10.0.1.20"}]}}`}},
		{"node-agent labels its node a worker", nodeAgent("worker-0"), "worker-0", write{patch: `{"metadata":{"labels":{"node-role.kubernetes.io/worker":""}}}`}},
		{"the agent annotates its node", agentOn("worker-0"), "worker-0", write{statusPatch: true, patch: ciliumAnnotations}},
		{"the agent on a control-plane node annotates it", agentOn("cp-0"), "cp-0", write{statusPatch: true, patch: ciliumAnnotations}},
		{"the operator marks a node's network available", operatorOn("worker-0"), "cp-0", write{statusPatch: true, patch: networkAvailable}},
		{"the operator taints a node whose agent is not ready", operatorOn("worker-0"), "cp-1", write{patchType: types.JSONPatchType, patch: `[{"op":"add","path":"/spec/taints/-","value":{"key":"node.cilium.io/agent-not-ready","effect":"NoSchedule"}}]`}},
		{"node-problem-detector reports on its node", npdOn("worker-0"), "worker-0", write{statusPatch: true, patch: kernelDeadlock}},
		{"the resource manager removes a node's label", testenv.ServiceAccount("kube-system", "gardener-resource-manager", ""), "cp-0", write{patch: stripControlPlane}},
		{"gardenlet labels a node with its node-agent secret", testenv.ServiceAccount("kube-system", "gardenlet", ""), "cp-0", write{patch: `{"metadata":{"labels":{"worker.gardener.cloud/gardener-node-agent-secret-name":"gardener-node-agent-control-plane-1a2b3c"}}}`}},
		{"kube-controller-manager's node controller marks a node unknown", testenv.ServiceAccount("kube-system", "node-controller", ""), "cp-0", write{statusPatch: true, patch: `{"status":{"conditions":[{"type":"Ready","status":"Unknown","reason":"NodeStatusUnknown"}]}}`}},
		{"gardenadm's cluster-admin account labels a node control-plane", testenv.ServiceAccount("kube-system", "cluster-admin", ""), "worker-1", write{patch: labelControlPlane}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.w.dryRun(ctx, as(t, tc.id), tc.node); err != nil {
				t.Errorf("%s on %s: %v", tc.id.User, tc.node, err)
			}
		})
	}
}

// TestCiliumWritesAndUndoes: Cilium's agent writes its annotations and takes them away again (pkg/k8s annotate.go
// RemoveNodeAnnotations: a JSON patch of the status), and cilium-operator taints a node and lifts the taint with its
// test-and-replace of the whole list (operator/watchers node_taint.go setNodeTaint, removeNodeTaint): for real, each
// node as it was afterwards.
func TestCiliumWritesAndUndoes(t *testing.T) {
	ctx := context.Background()
	agent, operator := as(t, agentOn("worker-1")), as(t, operatorOn("worker-0"))
	if err := (write{statusPatch: true, patch: ciliumAnnotations}).send(ctx, agent, "worker-1", false); err != nil {
		t.Fatal(err)
	}
	removal := `[{"op":"remove","path":"/metadata/annotations/network.cilium.io~1ipv4-cilium-host"},{"op":"remove","path":"/metadata/annotations/network.cilium.io~1ipv4-health-ip"},{"op":"remove","path":"/metadata/annotations/network.cilium.io~1ipv4-pod-cidr"}]`
	if err := (write{statusPatch: true, patchType: types.JSONPatchType, patch: removal}).send(ctx, agent, "worker-1", false); err != nil {
		t.Fatal(err)
	}

	node := &corev1.Node{}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: "worker-1"}, node); err != nil {
		t.Fatal(err)
	}
	before := node.Spec.Taints
	tainted := append(append([]corev1.Taint{}, before...), corev1.Taint{Key: "node.cilium.io/agent-not-ready", Effect: corev1.TaintEffectNoSchedule})
	for _, step := range []struct{ from, to []corev1.Taint }{{before, tainted}, {tainted, before}} {
		if err := (write{patchType: types.JSONPatchType, patch: testAndReplaceTaints(t, step.from, step.to)}).send(ctx, operator, "worker-1", false); err != nil {
			t.Fatal(err)
		}
	}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: "worker-1"}, node); err != nil {
		t.Fatal(err)
	}
	for key := range node.Annotations {
		if strings.HasPrefix(key, "network.cilium.io/") {
			t.Errorf("annotation %s left on worker-1", key)
		}
	}
	if len(node.Spec.Taints) != len(before) {
		t.Errorf("worker-1's taints %v, want %v", node.Spec.Taints, before)
	}
}

func testAndReplaceTaints(t *testing.T, from, to []corev1.Taint) string {
	t.Helper()
	patch, err := json.Marshal([]map[string]any{{"op": "test", "path": "/spec/taints", "value": from}, {"op": "replace", "path": "/spec/taints", "value": to}})
	if err != nil {
		t.Fatal(err)
	}
	return string(patch)
}

// TestGardenadmInitJoinRestore replays, in their order, the Node writes of gardenadm init (the first control-plane
// node), join (a worker) and restore (the control-plane node back under a new name and address): kubelet registers
// the Node with the control-plane taint (gardener pkg/component/extensions/operatingsystemconfig
// operatingsystemconfig.go) and reports its address, then the node's gardener-node-agent sets the role label
// (pkg/nodeagent/controller/operatingsystemconfig reconciler.go; gardenadm's own run of that reconciler writes to a
// fake client, pkg/gardenadm/botanist botanist.go). Each write passes, for real.
func TestGardenadmInitJoinRestore(t *testing.T) {
	ctx := context.Background()
	for _, step := range []struct {
		name, node, address string
		controlPlane        bool
	}{
		{"init", "replay-cp-a", "10.0.1.30", true},
		{"join", "replay-worker-b", "10.0.2.30", false},
		{"restore", "replay-cp-c", "10.0.1.31", true},
	} {
		kubelet, nodeAgentClient := as(t, testenv.Kubelet(step.node)), as(t, nodeAgent(step.node))
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: step.node, Labels: map[string]string{corev1.LabelHostname: step.node}}}
		role := "worker"
		if step.controlPlane {
			role = "control-plane"
			node.Spec.Taints = []corev1.Taint{{Key: "node-role.kubernetes.io/control-plane", Effect: corev1.TaintEffectNoSchedule}}
		}
		if err := kubelet.Create(ctx, node); err != nil {
			t.Fatalf("%s: kubelet registering %s: %v", step.name, step.node, err)
		}
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), node) })
		node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: step.address}, {Type: corev1.NodeHostName, Address: step.node}}
		if err := kubelet.Status().Update(ctx, node); err != nil {
			t.Fatalf("%s: kubelet reporting %s's address: %v", step.name, step.node, err)
		}
		label := write{patch: `{"metadata":{"labels":{"node-role.kubernetes.io/` + role + `":""}}}`}
		if err := label.send(ctx, nodeAgentClient, step.node, false); err != nil {
			t.Fatalf("%s: gardener-node-agent labelling %s: %v", step.name, step.node, err)
		}
	}
}
