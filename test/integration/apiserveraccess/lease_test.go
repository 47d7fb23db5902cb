// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package apiserveraccess_test

import (
	"context"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/testenv"
)

// leaderLease is the extension's leader election lease (--leader-election-namespace, the framework's lease name).
func leaderLease(ctx context.Context) (*coordinationv1.Lease, error) {
	lease := &coordinationv1.Lease{}
	return lease, env.Client.Get(ctx, client.ObjectKey{Namespace: testenv.ExtensionNamespace, Name: "cilium-selfhosted-leader-election"}, lease)
}

// TestLeaseReleasedOnShutdown: an extension that stops as kubelet stops it (SIGTERM) gives up its leader lease, so
// that another replica takes over the controllers at once rather than after the lease runs out; started again, it
// leads again.
func TestLeaseReleasedOnShutdown(t *testing.T) {
	ctx := context.Background()
	if err := testenv.WaitFor(ctx, 30*time.Second, func(ctx context.Context) (bool, error) {
		lease, err := leaderLease(ctx)
		return err == nil && ptr.Deref(lease.Spec.HolderIdentity, "") != "", client.IgnoreNotFound(err)
	}); err != nil {
		t.Fatalf("the extension holds no lease: %v", err)
	}
	env.Extensions().Stop(ctx, false)
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			_ = env.Extensions().StartAgain()
		}
	})
	lease, err := leaderLease(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if holder := ptr.Deref(lease.Spec.HolderIdentity, ""); holder != "" {
		t.Errorf("the stopped extension still holds its lease: %q", holder)
	}
	if err := env.Extensions().StartAgain(); err != nil {
		t.Fatal(err)
	}
	restarted = true
	if err := testenv.WaitFor(ctx, 30*time.Second, func(ctx context.Context) (bool, error) {
		lease, err := leaderLease(ctx)
		return err == nil && ptr.Deref(lease.Spec.HolderIdentity, "") != "", err
	}); err != nil {
		t.Fatalf("the restarted extension does not lead: %v", err)
	}
}
