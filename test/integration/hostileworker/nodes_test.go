// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package hostileworker_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	v1beta1constants "github.com/gardener/gardener/pkg/apis/core/v1beta1/constants"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/testenv"
)

const (
	nodeAgentGroup = v1beta1constants.NodeAgentsGroup
	// policyPrefix starts the name of every policy of the chart in kube-apiserver's refusals.
	policyPrefix = "ValidatingAdmissionPolicy 'gardener-extension-cilium-selfhosted-"

	labelControlPlane = `{"metadata":{"labels":{"node-role.kubernetes.io/control-plane":""}}}`
	stripControlPlane = `{"metadata":{"labels":{"node-role.kubernetes.io/control-plane":null}}}`
	// Strategic merge patches of a list with a merge key (NodeAddress by type, NodeCondition by type) change the
	// entry of that key, as kubelet's and Cilium's patches do.
	moveInternalIP = `{"status":{"addresses":[{"type":"InternalIP","address":"10.0.2.10"}]}}`
	notReady       = `{"status":{"conditions":[{"type":"Ready","status":"False","reason":"KubeletNotReady"}]}}`
	kubeletReady   = `{"status":{"conditions":[{"type":"Ready","status":"True","reason":"KubeletReady"}]}}`
	// ciliumAnnotations is the patch of Cilium's agent (pkg/k8s annotate.go updateNodeAnnotation, sent to the status
	// subresource).
	ciliumAnnotations = `{"metadata":{"annotations":{"network.cilium.io/ipv4-cilium-host":"100.64.0.1","network.cilium.io/ipv4-health-ip":"100.64.0.2","network.cilium.io/ipv4-pod-cidr":"100.64.0.0/24"}}}`
	// networkAvailable is cilium-operator's (operator/watchers node_taint.go setNodeNetworkUnavailableFalse, PatchStatus).
	networkAvailable = `{"status":{"conditions":[{"type":"NetworkUnavailable","status":"False","reason":"CiliumIsUp","message":"Cilium is running on this node","lastTransitionTime":"2026-12-07T00:00:00Z","lastHeartbeatTime":"2026-12-07T00:00:00Z"}]}}`
	// kernelDeadlock is one of node-problem-detector's conditions.
	kernelDeadlock = `{"status":{"conditions":[{"type":"KernelDeadlock","status":"False","reason":"KernelHasNoDeadlock","lastTransitionTime":"2026-12-07T00:00:00Z","lastHeartbeatTime":"2026-12-07T00:00:00Z"}]}}`
)

func agentOn(node string) testenv.Identity {
	return testenv.ServiceAccount("kube-system", "cilium", node)
}
func operatorOn(node string) testenv.Identity {
	return testenv.ServiceAccount("kube-system", "cilium-operator", node)
}
func npdOn(node string) testenv.Identity {
	return testenv.ServiceAccount("kube-system", "node-problem-detector", node)
}

// nodeAgent is gardener-node-agent of node: its client certificate's user and group (pkg/nodeagent certificate.go;
// gardenadm names the machine after the host, pkg/gardenadm/botanist nodeagent.go).
func nodeAgent(node string) testenv.Identity {
	return testenv.Identity{User: v1beta1constants.NodeAgentUserNamePrefix + node, Groups: []string{nodeAgentGroup, "system:authenticated"}}
}

// write is one request on a Node: a patch of the object or of its status subresource.
type write struct {
	statusPatch bool
	// patchType is a strategic merge patch unless set.
	patchType types.PatchType
	patch     string
}

func (w write) send(ctx context.Context, c client.Client, node string, dryRun bool) error {
	obj := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}
	patchType := w.patchType
	if patchType == "" {
		patchType = types.StrategicMergePatchType
	}
	patch := client.RawPatch(patchType, []byte(w.patch))
	var dryRunAll []string
	if dryRun {
		dryRunAll = []string{metav1.DryRunAll}
	}
	if w.statusPatch {
		return c.Status().Patch(ctx, obj, patch, &client.SubResourcePatchOptions{PatchOptions: client.PatchOptions{DryRun: dryRunAll}})
	}
	return c.Patch(ctx, obj, patch, &client.PatchOptions{DryRun: dryRunAll})
}

func (w write) dryRun(ctx context.Context, c client.Client, node string) error {
	return w.send(ctx, c, node, true)
}

func as(t *testing.T, id testenv.Identity) client.Client {
	t.Helper()
	c, err := env.ClientAs(id)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestHostileWorkerCannotMoveTheControlPlane: with the tokens root on worker-0 holds (Cilium's agent bound to
// worker-0, cilium-operator, which may run there, node-problem-detector, the node's kubelet and gardener-node-agent),
// each with its real RBAC, no write makes a worker a control-plane node, takes a control-plane node out, moves its
// address or reaches beyond what the component writes; each is refused by the chart's policies (kubelet's by
// NodeRestriction), as a dry run.
func TestHostileWorkerCannotMoveTheControlPlane(t *testing.T) {
	ctx := context.Background()
	taintJSON := func(op, value string) string {
		return `[{"op":"` + op + `","path":"/spec/taints/-","value":` + value + `}]`
	}
	for _, tc := range []struct {
		name string
		id   testenv.Identity
		node string
		w    write
		// refusal holds what the refusal says, one of them; empty for a refusal by NodeRestriction.
		refusal []string
	}{
		{"the agent labels its worker control-plane through /status", agentOn("worker-0"), "worker-0", write{statusPatch: true, patch: labelControlPlane}, []string{"metadata.labels"}},
		{"the agent labels another worker control-plane", agentOn("worker-0"), "worker-1", write{statusPatch: true, patch: labelControlPlane}, []string{"metadata.labels", "metadata.name"}},
		{"the agent strips a control-plane node's label", agentOn("worker-0"), "cp-0", write{statusPatch: true, patch: stripControlPlane}, []string{"metadata.labels", "metadata.name"}},
		{"the agent moves a control-plane node's address", agentOn("worker-0"), "cp-0", write{statusPatch: true, patch: moveInternalIP}, []string{"status.addresses", "metadata.name"}},
		{"the agent moves its own node's address", agentOn("worker-0"), "worker-0", write{statusPatch: true, patch: `{"status":{"addresses":[{"type":"InternalIP","address":"10.0.1.10"}]}}`}, []string{"status:"}},
		{"the agent annotates another node", agentOn("worker-0"), "worker-1", write{statusPatch: true, patch: ciliumAnnotations}, []string{"metadata.name"}},
		{"the agent sets an annotation not Cilium's", agentOn("worker-0"), "worker-0", write{statusPatch: true, patch: `{"metadata":{"annotations":{"node.gardener.cloud/critical-components-not-ready":"true"}}}`}, []string{"metadata.annotations"}},
		{"the agent's token names no node", agentOn(""), "worker-0", write{statusPatch: true, patch: ciliumAnnotations}, []string{"its token names no node"}},
		{"the agent marks its node not ready", agentOn("worker-0"), "worker-0", write{statusPatch: true, patch: notReady}, []string{"status.conditions"}},
		{"the operator labels a worker control-plane", operatorOn("worker-0"), "worker-0", write{patch: labelControlPlane}, []string{"metadata.labels"}},
		{"the operator strips a control-plane node's label", operatorOn("worker-0"), "cp-0", write{patch: stripControlPlane}, []string{"metadata.labels"}},
		{"the operator moves a control-plane node's address", operatorOn("worker-0"), "cp-0", write{statusPatch: true, patch: moveInternalIP}, []string{"status.addresses", "status:"}},
		{"the operator evicts with its own taint key", operatorOn("worker-0"), "cp-0", write{patchType: types.JSONPatchType, patch: taintJSON("add", `{"key":"node.cilium.io/agent-not-ready","effect":"NoExecute"}`)}, []string{"spec:"}},
		{"the operator taints a worker control-plane", operatorOn("worker-0"), "worker-1", write{patchType: types.JSONPatchType, patch: taintJSON("add", `{"key":"node-role.kubernetes.io/control-plane","effect":"NoSchedule"}`)}, []string{"spec:"}},
		{"the operator marks a control-plane node not ready", operatorOn("worker-0"), "cp-0", write{statusPatch: true, patch: notReady}, []string{"status.conditions"}},
		{"node-problem-detector reports on another node", npdOn("worker-0"), "cp-0", write{statusPatch: true, patch: kernelDeadlock}, []string{"metadata.name"}},
		{"node-problem-detector marks its node not ready", npdOn("worker-0"), "worker-0", write{statusPatch: true, patch: notReady}, []string{"status.conditions"}},
		{"node-problem-detector labels its node control-plane", npdOn("worker-0"), "worker-0", write{statusPatch: true, patch: labelControlPlane}, []string{"metadata.labels"}},
		{"the worker's node-agent strips a control-plane node's label", nodeAgent("worker-0"), "cp-0", write{patch: stripControlPlane}, []string{"metadata.labels"}},
		{"the worker's node-agent moves a control-plane node's address", nodeAgent("worker-0"), "cp-0", write{statusPatch: true, patch: moveInternalIP}, []string{"status.addresses"}},
		{"the worker's kubelet labels its node control-plane", testenv.Kubelet("worker-0"), "worker-0", write{patch: labelControlPlane}, nil},
		{"the worker's kubelet moves a control-plane node's address", testenv.Kubelet("worker-0"), "cp-0", write{statusPatch: true, patch: moveInternalIP}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.w.dryRun(ctx, as(t, tc.id), tc.node)
			switch {
			case !apierrors.IsForbidden(err):
				t.Fatalf("%s on %s: %v, want a refusal", tc.id.User, tc.node, err)
			case tc.refusal == nil && strings.Contains(err.Error(), policyPrefix):
				t.Errorf("refused by the chart's policy, want kube-apiserver's own Node checks first: %v", err)
			case tc.refusal != nil && !strings.Contains(err.Error(), policyPrefix):
				t.Errorf("refused, but not by the chart's policies: %v", err)
			case tc.refusal != nil && !slices.ContainsFunc(tc.refusal, func(s string) bool { return strings.Contains(err.Error(), s) }):
				t.Errorf("refusal %q names none of %q", err, tc.refusal)
			}
		})
	}
}
