// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package hostileworker_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/cilium"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/exposure/resources"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/testenv"
)

// heldLease is an L2 announcement lease of an exposure, held by cp-0 as its agent would hold it; deleted when t ends.
func heldLease(t *testing.T, service string) *coordinationv1.Lease {
	t.Helper()
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: cilium.Namespace, Name: cilium.L2AnnouncementLeaseName(cilium.Namespace, service)},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To("cp-0"), LeaseDurationSeconds: ptr.To[int32](15)},
	}
	if err := env.Client.Create(context.Background(), lease); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), lease) })
	return lease
}

// TestHostileWorkerCannotTakeLeases: with Cilium's agent token of worker-0 and cilium-operator's, each with the RBAC
// networking-cilium's chart gives it (every Lease), no one takes over another component's leader election, holds an
// L2 announcement for another node or drops a lease someone holds; the extension's token writes no tenant's L2 lease.
// Dry runs, each refused by the chart's policies.
func TestHostileWorkerCannotTakeLeases(t *testing.T) {
	ctx := context.Background()
	exposureLease := heldLease(t, resources.ServiceName("attacked"))
	tenantLease := heldLease(t, "web")
	// update sends the stored lease namespace/name with holder and a duration of an hour, as Cilium's and the
	// extension's RBAC allow: an update, not a patch.
	// update is read afresh on a conflict: the extension renews its own lease every few seconds.
	update := func(c client.Client, namespace, name, holder string) error {
		return retry.RetryOnConflict(retry.DefaultRetry, func() error {
			lease := &coordinationv1.Lease{}
			if err := env.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, lease); err != nil {
				return err
			}
			lease.Spec.HolderIdentity, lease.Spec.LeaseDurationSeconds = ptr.To(holder), ptr.To[int32](3600)
			return c.Update(ctx, lease, &client.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
		})
	}
	newLease := func(namespace, name, holder string) *coordinationv1.Lease {
		return &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder), LeaseDurationSeconds: ptr.To[int32](15)},
		}
	}
	dryRun := []string{metav1.DryRunAll}
	for _, tc := range []struct {
		name    string
		c       client.Client
		write   func(client.Client) error
		refusal string
	}{
		{"the agent takes kube-controller-manager's election", as(t, agentOn("worker-0")), func(c client.Client) error {
			return c.Create(ctx, newLease(cilium.Namespace, "kube-controller-manager", "worker-0"), &client.CreateOptions{DryRun: dryRun})
		}, "metadata.name"},
		{"the agent takes the extension's election", as(t, agentOn("worker-0")), func(c client.Client) error {
			return update(c, testenv.ExtensionNamespace, "cilium-selfhosted-leader-election", "worker-0")
		}, "metadata.name"},
		{"the agent hands an announcement to another node", as(t, agentOn("worker-0")), func(c client.Client) error {
			return c.Create(ctx, newLease(cilium.Namespace, cilium.L2AnnouncementLeaseName(cilium.Namespace, "new"), "worker-1"), &client.CreateOptions{DryRun: dryRun})
		}, "spec.holderIdentity"},
		{"the agent renews another node's announcement", as(t, agentOn("worker-0")), func(c client.Client) error {
			return update(c, exposureLease.Namespace, exposureLease.Name, "cp-0")
		}, "spec.holderIdentity"},
		{"the agent drops a held announcement", as(t, agentOn("worker-0")), func(c client.Client) error {
			return c.Delete(ctx, exposureLease.DeepCopy(), &client.DeleteOptions{DryRun: dryRun})
		}, "spec.holderIdentity"},
		{"an agent whose token names no node takes an announcement", as(t, agentOn("")), func(c client.Client) error {
			return c.Create(ctx, newLease(cilium.Namespace, cilium.L2AnnouncementLeaseName(cilium.Namespace, "new"), "worker-0"), &client.CreateOptions{DryRun: dryRun})
		}, "its token names no node"},
		{"the operator takes kube-scheduler's election", as(t, operatorOn("worker-0")), func(c client.Client) error {
			return c.Create(ctx, newLease(cilium.Namespace, "kube-scheduler", "worker-0"), &client.CreateOptions{DryRun: dryRun})
		}, "metadata.name"},
		{"the operator takes an announcement", as(t, operatorOn("worker-0")), func(c client.Client) error {
			return update(c, exposureLease.Namespace, exposureLease.Name, "worker-0")
		}, "metadata.name"},
		{"the extension's token keeps a tenant's Service dark", env.ExtensionClient(t), func(c client.Client) error {
			return update(c, tenantLease.Namespace, tenantLease.Name, "")
		}, "metadata.name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.write(tc.c)
			switch {
			case !apierrors.IsForbidden(err):
				t.Fatalf("%v, want a refusal", err)
			case !strings.Contains(err.Error(), policyPrefix) || !strings.Contains(err.Error(), tc.refusal):
				t.Errorf("refusal %q is not the chart's policy naming %s", err, tc.refusal)
			}
		})
	}
}

// TestCiliumElectsAsItDoes: Cilium's agents elect the announcer of a Service and cilium-operator its leader with
// client-go's leader election on their leases (pkg/l2announcer newLeaseLock, identity the node's name, released on
// cancel; operator/cmd root.go), and an agent deletes a lease nobody holds (leaseGC): each passes the chart's
// policies, for real.
func TestCiliumElectsAsItDoes(t *testing.T) {
	announcement := cilium.L2AnnouncementLeaseName(cilium.Namespace, resources.ServiceName("elected"))
	for _, tc := range []struct {
		id             testenv.Identity
		name, identity string
	}{
		{agentOn("cp-1"), announcement, "cp-1"},
		{agentOn("worker-1"), announcement, "worker-1"},
		{operatorOn("worker-0"), "cilium-operator-resource-lock", "worker-0-operator"},
	} {
		elect(t, tc.id, tc.name, tc.identity)
	}
	gc := as(t, agentOn("worker-0"))
	if err := gc.Delete(context.Background(), &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: cilium.Namespace, Name: announcement}}); err != nil {
		t.Errorf("an agent deleting a released lease: %v", err)
	}
	_ = env.Client.Delete(context.Background(), &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: cilium.Namespace, Name: "cilium-operator-resource-lock"}})
}

// elect runs client-go's leader election on the lease namespace/name as id, under identity, until it leads, and
// releases the lease. No write of it may be refused. client-go's release is best effort (tools/leaderelection release
// only logs its error: a conflict with its own renewal that the cancel cut off client-side but kube-apiserver still
// carried out, or its 5 s deadline on a loaded machine); then the test sends the same write again.
func elect(t *testing.T, id testenv.Identity, name, identity string) {
	t.Helper()
	config := env.ConfigAs(id)
	var writes leaseWrites
	config.Wrap(writes.record)
	clientset, err := kubernetes.NewForConfig(config)
	if err != nil {
		t.Fatal(err)
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: cilium.Namespace, Name: name},
		Client:     clientset.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: identity},
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var led atomic.Bool
	leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
		Lock:          lock,
		LeaseDuration: 15 * time.Second, RenewDeadline: 5 * time.Second, RetryPeriod: 200 * time.Millisecond,
		ReleaseOnCancel: true,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(context.Context) { led.Store(true); cancel() },
			OnStoppedLeading: func() {},
		},
	})
	if !led.Load() {
		t.Fatalf("%s never led %s as %s", id.User, name, identity)
	}
	if refused := writes.refused(); len(refused) > 0 {
		t.Errorf("writes of %s as %s refused: %v", name, identity, refused)
	}
	if holder := leaseHolder(t, name); holder == identity && len(writes.refused()) == 0 {
		t.Logf("client-go's release of %s did not take (its writes were answered %v); releasing again", name, writes.answers())
		if err := release(lock); err != nil {
			t.Errorf("releasing %s as %s: %v", name, identity, err)
		}
	}
	if holder := leaseHolder(t, name); holder != "" {
		t.Errorf("%s still held by %s after %s released it", name, holder, identity)
	}
}

// release sends client-go's release of lock (tools/leaderelection LeaderElector.release).
func release(lock *resourcelock.LeaseLock) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	old, _, err := lock.Get(ctx)
	if err != nil {
		return err
	}
	now := metav1.Now()
	return lock.Update(ctx, resourcelock.LeaderElectionRecord{LeaderTransitions: old.LeaderTransitions, LeaseDurationSeconds: 1, RenewTime: now, AcquireTime: now})
}

func leaseHolder(t *testing.T, name string) string {
	t.Helper()
	lease := &coordinationv1.Lease{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: cilium.Namespace, Name: name}, lease); err != nil {
		t.Fatal(err)
	}
	return ptr.Deref(lease.Spec.HolderIdentity, "")
}

// leaseWrites records the answers kube-apiserver gave to a client's writes.
type leaseWrites struct {
	mu       sync.Mutex
	statuses []int
	bodies   []string
}

func (w *leaseWrites) record(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(req)
		if err != nil || req.Method == http.MethodGet {
			return resp, err
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		w.statuses = append(w.statuses, resp.StatusCode)
		body := ""
		if resp.StatusCode == http.StatusForbidden {
			b, _ := io.ReadAll(resp.Body)
			resp.Body = io.NopCloser(bytes.NewReader(b))
			body = string(b)
		}
		w.bodies = append(w.bodies, body)
		return resp, nil
	})
}

func (w *leaseWrites) refused() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var refused []string
	for i, status := range w.statuses {
		if status == http.StatusForbidden {
			refused = append(refused, w.bodies[i])
		}
	}
	return refused
}

func (w *leaseWrites) answers() []int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.statuses)
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }
