// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package hostileworker_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/testenv"
)

// chartNodePolicies are the chart's policies that match Nodes, as the resource manager installed them.
func chartNodePolicies(t *testing.T) []*admissionregistrationv1.ValidatingAdmissionPolicy {
	t.Helper()
	list := &admissionregistrationv1.ValidatingAdmissionPolicyList{}
	if err := env.Client.List(context.Background(), list, client.MatchingLabels{"app.kubernetes.io/name": "gardener-extension-cilium-selfhosted"}); err != nil {
		t.Fatal(err)
	}
	var policies []*admissionregistrationv1.ValidatingAdmissionPolicy
	for i := range list.Items {
		p := &list.Items[i]
		for _, r := range p.Spec.MatchConstraints.ResourceRules {
			if slices.Contains(r.Resources, "nodes") || slices.Contains(r.Resources, "nodes/status") || slices.Contains(r.Resources, "*") {
				policies = append(policies, p)
				break
			}
		}
	}
	if len(policies) == 0 {
		t.Fatal("the chart installed no policy on Nodes")
	}
	return policies
}

// TestBrokenNodePolicyStillAdmitsKubeletAndNodeAgent: a Node policy of the chart whose validation fails at run time
// (here: each validation of a copy reads a label no Node has) refuses what it matches under its failurePolicy, and
// still never stops kubelet's and gardener-node-agent's writes, which its match conditions leave out before any
// validation runs. The chart's Node policies take no parameter: kube-apiserver resolves a binding's parameter before
// the match conditions (k8s.io/apiserver pkg/admission/plugin/policy/validating dispatcher.go), and a missing one
// would refuse kubelet's writes too, as the last step shows.
func TestBrokenNodePolicyStillAdmitsKubeletAndNodeAgent(t *testing.T) {
	ctx := context.Background()
	for _, p := range chartNodePolicies(t) {
		if p.Spec.ParamKind != nil {
			t.Errorf("policy %s on Nodes takes a parameter (%v): a missing one refuses every Node write", p.Name, p.Spec.ParamKind)
		}
		broken := p.DeepCopy()
		broken.ObjectMeta = metav1.ObjectMeta{Name: "test-broken-" + strings.TrimPrefix(p.Name, "gardener-extension-cilium-selfhosted-")}
		for i := range broken.Spec.Validations {
			broken.Spec.Validations[i].Expression = "object.metadata.labels['test.invalid/no-such-label'] == ''"
		}
		create(t, broken, testenv.PolicyBinding(broken.Name, nil))
	}
	// The copies hold once the agent's own annotation, which the chart's policies let through, is refused.
	refusedByCopy := func(ctx context.Context) (bool, error) {
		err := write{statusPatch: true, patch: ciliumAnnotations}.dryRun(ctx, as(t, agentOn("worker-0")), "worker-0")
		return err != nil && strings.Contains(err.Error(), "test-broken-"), nil
	}
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, refusedByCopy); err != nil {
		t.Fatalf("the broken copies are not enforced: %v", err)
	}
	for _, tc := range []struct {
		name string
		id   testenv.Identity
		w    write
	}{
		{"kubelet", testenv.Kubelet("cp-0"), write{statusPatch: true, patch: `{"status":{"addresses":[{"type":"InternalIP","address":"10.0.1.20"}]}}`}},
		{"node-agent", nodeAgent("cp-0"), write{patch: labelControlPlane}},
	} {
		if err := tc.w.dryRun(ctx, as(t, tc.id), "cp-0"); err != nil {
			t.Errorf("%s's write refused beside a broken Node policy: %v", tc.name, err)
		}
	}

	// What a parameter would do: the same exemption, a binding whose parameter is missing.
	withParam := chartNodePolicies(t)[0].DeepCopy()
	withParam.ObjectMeta = metav1.ObjectMeta{Name: "test-missing-parameter"}
	withParam.Spec.ParamKind = &admissionregistrationv1.ParamKind{APIVersion: "v1", Kind: "ConfigMap"}
	create(t, withParam, testenv.PolicyBinding(withParam.Name, &admissionregistrationv1.ParamRef{
		Name: "test-missing", Namespace: metav1.NamespaceSystem, ParameterNotFoundAction: ptr.To(admissionregistrationv1.DenyAction),
	}))
	var last error
	refusesKubelet := func(ctx context.Context) (bool, error) {
		last = write{statusPatch: true, patch: `{"status":{"addresses":[{"type":"InternalIP","address":"10.0.1.20"}]}}`}.dryRun(ctx, as(t, testenv.Kubelet("cp-0")), "cp-0")
		return last != nil && strings.Contains(last.Error(), "no params found"), nil
	}
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, refusesKubelet); err != nil {
		t.Errorf("a Node policy whose parameter is missing did not refuse kubelet's write (%v), which is why the chart's take none: %v", last, err)
	}
}

// create creates a policy and its binding and, when t ends, deletes them and waits until kube-apiserver no longer
// enforces the policy on kubelet's and Cilium's agent's writes, for the cases that run after it.
func create(t *testing.T, policy *admissionregistrationv1.ValidatingAdmissionPolicy, binding *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	t.Helper()
	testenv.CreatePolicy(t, env.Client, policy, binding, func(ctx context.Context) bool {
		for _, w := range []struct {
			id testenv.Identity
			w  write
		}{{agentOn("worker-0"), write{statusPatch: true, patch: ciliumAnnotations}}, {testenv.Kubelet("worker-0"), write{statusPatch: true, patch: kubeletReady}}} {
			if err := w.w.dryRun(ctx, as(t, w.id), "worker-0"); err != nil && strings.Contains(err.Error(), policy.Name) {
				return true
			}
		}
		return false
	})
}
