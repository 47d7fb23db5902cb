// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package apiserveraccess_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/ciliumchart"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/testenv"
)

// TestWebhookOutlivesAPIServerRestart: on a single control-plane node, kube-apiserver's static pod is down for 30 s,
// as when kubelet restarts it for an etcd or certificate change. That is longer than the lease's renew deadline
// (10 s), so the extension loses its lease. The process must not exit: its webhook server answers every admission,
// during the outage and after it, and its controllers lead again once kube-apiserver is back and work (a new
// control-plane node reaches the endpoints ConfigMap), and kube-apiserver has the webhook pin a Cilium pod created
// through it after the outage.
func TestWebhookOutlivesAPIServerRestart(t *testing.T) {
	ctx := context.Background()
	admit := admitter(t, env.Extensions().WebhookAddress())
	if err := testenv.WaitFor(ctx, time.Minute, func(ctx context.Context) (bool, error) { return admit(ctx) == nil, nil }); err != nil {
		t.Fatalf("the extension does not answer admissions: %v (last: %v)", err, admit(ctx))
	}
	var leader string
	if err := testenv.WaitFor(ctx, time.Minute, func(ctx context.Context) (bool, error) {
		lease, err := leaderLease(ctx)
		leader = ptr.Deref(lease.Spec.HolderIdentity, "")
		return err == nil && leader != "", client.IgnoreNotFound(err)
	}); err != nil {
		t.Fatalf("the extension does not lead: %v", err)
	}
	logBefore := len(env.Extension.Log())

	stopAdmitting := admitContinuously(ctx, admit)
	if err := env.RestartAPIServer(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	if err := testenv.WaitFor(ctx, time.Minute, func(ctx context.Context) (bool, error) {
		lease, err := leaderLease(ctx)
		return err == nil && ptr.Deref(lease.Spec.HolderIdentity, "") == leader && lease.Spec.RenewTime.After(back), err
	}); err != nil {
		t.Fatalf("the extension does not lead again after kube-apiserver came back: %v", err)
	}
	t.Logf("leading again %s after kube-apiserver came back", time.Since(back).Round(100*time.Millisecond))
	answered, failures := stopAdmitting()

	select {
	case <-env.Extension.Stopped():
		t.Fatalf("the extension exited: %v\n%s", env.Extension.Err(), env.Extension.LogTail(40))
	default:
	}
	// Either message of pkg/processmodel: the lease lost, or a runnable of the term failed without kube-apiserver.
	if log := env.Extension.Log()[logBefore:]; !strings.Contains(log, "webhooks keep being served") {
		t.Errorf("the extension's leader term did not end during 30 s without kube-apiserver; the test did not test what it says:\n%s", log)
	}
	if len(failures) > 0 || answered == 0 {
		t.Errorf("around the outage the webhook answered %d admissions and failed %d: %v", answered, len(failures), failures)
	}

	// The path production takes: kube-apiserver calls the webhook with the configuration and CA bundle the leader term
	// registered. Admission is failurePolicy Ignore, so one that kube-apiserver cannot use passes pods unpinned.
	rendered, err := ciliumchart.Render(version, ciliumchart.Values(version))
	if err != nil {
		t.Fatal(err)
	}
	want := ciliumchart.DaemonSetPod(rendered.Agent, "worker-0")
	want.Name = "agent-after-restart"
	if err := testenv.WaitFor(ctx, 30*time.Second, func(ctx context.Context) (bool, error) {
		probe := want.DeepCopy()
		if err := env.Client.Create(ctx, probe, client.DryRunAll); err != nil {
			return false, err
		}
		return len(ciliumchart.VerifyEnv(&probe.Spec, &want.Spec, ciliumchart.WantByName(version), endpoints(t))) == 0, nil
	}); err != nil {
		t.Fatalf("after kube-apiserver came back, it does not have the webhook pin a Cilium agent pod: %v", err)
	}
	pod := want.DeepCopy()
	if err := env.Client.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), pod) })
	verifyPod(t, "agent created through kube-apiserver after its restart", pod, want, false, endpoints(t))

	if err := endpointsFollowNewNode(t, "cp-after-restart", "10.0.1.16"); err != nil {
		t.Errorf("the controllers do not work again after kube-apiserver came back: %v", err)
	}
}
