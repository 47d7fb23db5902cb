// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package testenv

import (
	"context"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// CreatePolicy creates policy and its binding with c and, when t ends, deletes them and waits until enforced says
// kube-apiserver no longer enforces the policy, for the tests that run after it.
func CreatePolicy(t *testing.T, c client.Client, policy *admissionregistrationv1.ValidatingAdmissionPolicy, binding *admissionregistrationv1.ValidatingAdmissionPolicyBinding, enforced func(context.Context) bool) {
	t.Helper()
	for _, obj := range []client.Object{policy, binding} {
		if err := c.Create(context.Background(), obj); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		ctx := context.Background()
		for _, obj := range []client.Object{binding, policy} {
			if err := client.IgnoreNotFound(c.Delete(ctx, obj)); err != nil {
				t.Error(err)
			}
		}
		gone := func(ctx context.Context) (bool, error) { return !enforced(ctx), nil }
		if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, gone); err != nil {
			t.Errorf("policy %s still enforced after its deletion: %v", policy.Name, err)
		}
	})
}

// PolicyBinding binds the policy of that name, under its name, denying what it refuses, with param as its parameter
// (nil: none).
func PolicyBinding(policy string, param *admissionregistrationv1.ParamRef) *admissionregistrationv1.ValidatingAdmissionPolicyBinding {
	return &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: policy},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName: policy, ParamRef: param, ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
		},
	}
}
