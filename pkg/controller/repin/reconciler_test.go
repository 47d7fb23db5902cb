// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package repin_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	testclock "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/apiserverendpoints"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/cilium"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/controller/repin"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/scheme"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/fixtures"
)

var owner = metav1.OwnerReference{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "cilium", UID: "ds-uid", Controller: new(true)}

// ownedAgent is an agent pod of the DaemonSet, Ready or not.
func ownedAgent(name, node string, ready bool, aliases ...string) *corev1.Pod {
	pod := agent(name, node, apiserverendpoints.ServerName, aliases...)
	pod.UID = types.UID(name + "-uid")
	pod.OwnerReferences = []metav1.OwnerReference{owner}
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}
	return pod
}

type fixture struct {
	client   client.Client
	clock    *testclock.FakeClock
	recorder *events.FakeRecorder
	r        *repin.Reconciler
	dryRuns  int
}

// newFixture: one control-plane node cp-0 at 10.0.1.10. webhookAnswers says whether a dry-run create comes back
// pinned to it (to localhost on cp-0 itself), as the webhook pins (it stands for the webhook behind kube-apiserver, which test/integration/rollout
// runs for real), or unchanged, as when the webhook does not answer.
func newFixture(t *testing.T, webhookAnswers bool, pods ...*corev1.Pod) *fixture {
	t.Helper()
	f := &fixture{clock: testclock.NewFakeClock(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)), recorder: events.NewFakeRecorder(100)}
	cp := fixtures.Node("cp-0", "10.0.1.10", true)
	cp.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	objs := []client.Object{cp}
	for i := range 4 {
		w := fixtures.Node(fmt.Sprintf("w-%d", i), fmt.Sprintf("10.0.2.%d", 10+i), false)
		w.Status.Conditions = cp.Status.Conditions
		objs = append(objs, w)
	}
	for _, p := range pods {
		objs = append(objs, p)
	}
	f.client = fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(objs...).WithInterceptorFuncs(interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			o := (&client.CreateOptions{}).ApplyOptions(opts)
			if len(o.DryRun) == 0 {
				return c.Create(ctx, obj, opts...)
			}
			f.dryRuns++
			switch pod, ok := obj.(*corev1.Pod); {
			case !ok || !webhookAnswers:
			case pod.Spec.NodeName == cp.Name:
				pod.Spec.HostAliases = nil
				pod.Spec.Containers[0].Env = []corev1.EnvVar{{Name: cilium.EnvServiceHost, Value: apiserverendpoints.LocalHost}}
			default:
				pod.Spec.HostAliases = []corev1.HostAlias{{IP: "10.0.1.10", Hostnames: []string{apiserverendpoints.ServerName}}}
				pod.Spec.Containers[0].Env = []corev1.EnvVar{{Name: cilium.EnvServiceHost, Value: apiserverendpoints.ServerName}}
			}
			return nil
		},
	}).Build()
	f.r = &repin.Reconciler{Client: f.client, Recorder: f.recorder, Clock: f.clock,
		Options: repin.Options{BatchSize: 2, BatchTimeout: time.Minute, SlowInterval: time.Minute, ProbeRetry: 5 * time.Second}}
	return f
}

func (f *fixture) reconcile(t *testing.T) reconcile.Result {
	t.Helper()
	result, err := f.r.Reconcile(context.Background(), repin.Key)
	if err != nil {
		t.Fatal(err)
	}
	return result
}

func (f *fixture) remaining(t *testing.T) []string {
	t.Helper()
	pods := &corev1.PodList{}
	if err := f.client.List(context.Background(), pods); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range pods.Items {
		names = append(names, p.Name)
	}
	return names
}

// TestStrandedPodsInBatches: with the control plane moved to 10.0.1.10, three agents pinned to the old addresses are
// stranded. After a dry run came back pinned, a batch of two goes, the NotReady one first; the next waits until their
// replacements are Ready (or the batch's deadline).
func TestStrandedPodsInBatches(t *testing.T) {
	f := newFixture(t, true,
		ownedAgent("a", "w-0", true, "10.0.1.99"),
		ownedAgent("b", "w-1", false, "10.0.1.99"),
		ownedAgent("c", "w-2", true, "10.0.1.99"),
		ownedAgent("current", "w-3", true, "10.0.1.10"))
	f.reconcile(t)
	if got := strings.Join(f.remaining(t), ","); got != "c,current" {
		t.Errorf("pods left after the first batch: %s, want the NotReady b and then a gone", got)
	}
	if f.dryRuns != 1 {
		t.Errorf("%d dry runs, want 1 per batch", f.dryRuns)
	}
	if len(f.recorder.Events) != 2 {
		t.Errorf("%d events, want one per recreated pod", len(f.recorder.Events))
	} else if e := <-f.recorder.Events; !strings.Contains(e, repin.EventReason) || !strings.Contains(e, "stranded") {
		t.Errorf("event %q", e)
	}
	if result := f.reconcile(t); result.RequeueAfter == 0 || len(f.remaining(t)) != 2 {
		t.Errorf("the next batch did not wait for the replacements (requeue %v, pods %v)", result.RequeueAfter, f.remaining(t))
	}
	// The DaemonSet's replacements, pinned by the webhook, exist but are not Ready yet: the next batch waits.
	f.clock.Step(5 * time.Second)
	replacements := []*corev1.Pod{ownedAgent("a2", "w-0", false, "10.0.1.10"), ownedAgent("b2", "w-1", false, "10.0.1.10")}
	for _, p := range replacements {
		p.CreationTimestamp = metav1.NewTime(f.clock.Now())
		if err := f.client.Create(context.Background(), p); err != nil {
			t.Fatal(err)
		}
	}
	if result := f.reconcile(t); result.RequeueAfter == 0 || len(f.remaining(t)) != 4 {
		t.Errorf("the next batch did not wait for the replacements to be Ready (requeue %v, pods %v)", result.RequeueAfter, f.remaining(t))
	}
	for _, p := range replacements {
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		if err := f.client.Status().Update(context.Background(), p); err != nil {
			t.Fatal(err)
		}
	}
	f.reconcile(t)
	if got := strings.Join(f.remaining(t), ","); got != "a2,b2,current" {
		t.Errorf("pods after the second batch: %s, want c recreated too", got)
	}
}

// TestNothingWithoutTheWebhook: while a dry run comes back unpinned (the webhook does not answer), nothing is deleted.
func TestNothingWithoutTheWebhook(t *testing.T) {
	f := newFixture(t, false, ownedAgent("a", "w-0", false, "10.0.1.99"))
	if result := f.reconcile(t); result.RequeueAfter == 0 {
		t.Error("no requeue")
	}
	f.reconcile(t) // an event: the failed probe is not repeated at once
	if got := f.remaining(t); len(got) != 1 || f.dryRuns != 1 {
		t.Errorf("pods %v, %d dry runs; want the stranded one kept and one dry run", got, f.dryRuns)
	}
	f.clock.Step(4 * time.Second)
	f.reconcile(t)
	if f.dryRuns != 1 {
		t.Errorf("%d dry runs within the probe retry, want one", f.dryRuns)
	}
	f.clock.Step(time.Second)
	f.reconcile(t)
	if f.dryRuns != 2 {
		t.Errorf("%d dry runs, want a second after the probe retry", f.dryRuns)
	}
}

// TestOrphansLeftAlone: a Cilium pod that no DaemonSet or ReplicaSet controls would not come back.
func TestOrphansLeftAlone(t *testing.T) {
	pod := ownedAgent("a", "w-0", false, "10.0.1.99")
	pod.OwnerReferences = nil
	f := newFixture(t, true, pod)
	f.reconcile(t)
	if got := f.remaining(t); len(got) != 1 || f.dryRuns != 0 {
		t.Errorf("pods %v, %d dry runs; want the orphan kept", got, f.dryRuns)
	}
}

// TestDegradedAndUnpinnedOneAtATime: pods that still reach kube-apiserver go one per SlowInterval.
func TestDegradedAndUnpinnedOneAtATime(t *testing.T) {
	unpinned := ownedAgent("u", "w-1", true)
	unpinned.Spec.Containers[0].Env = nil
	f := newFixture(t, true, ownedAgent("d", "w-0", true, "10.0.1.99", "10.0.1.10"), unpinned)
	f.reconcile(t)
	if got := f.remaining(t); len(got) != 1 {
		t.Fatalf("pods %v, want one of the two recreated", got)
	}
	f.clock.Step(2 * time.Minute) // the batch's deadline and the slow interval pass
	f.reconcile(t)
	if got := f.remaining(t); len(got) != 0 {
		t.Errorf("pods %v, want the second recreated after the slow interval", got)
	}
}

// TestMisplacedControlPlanePodRecreated: a control-plane node's agent admitted as a worker's (the webhook's view did
// not know the node yet) is recreated once a dry run comes back pinned to localhost, and kept while the webhook does
// not answer.
func TestMisplacedControlPlanePodRecreated(t *testing.T) {
	for _, webhookAnswers := range []bool{true, false} {
		t.Run(fmt.Sprintf("webhook answers %t", webhookAnswers), func(t *testing.T) {
			f := newFixture(t, webhookAnswers, ownedAgent("cp", "cp-0", true, "10.0.1.10"))
			f.reconcile(t)
			if got := f.remaining(t); (len(got) == 0) != webhookAnswers || f.dryRuns != 1 {
				t.Errorf("pods %v after %d dry runs, want the misplaced pod recreated: %t", got, f.dryRuns, webhookAnswers)
			}
			if webhookAnswers {
				if e := <-f.recorder.Events; !strings.Contains(e, string(repin.Misplaced)) {
					t.Errorf("event %q, want it to name the pinning %s", e, repin.Misplaced)
				}
			}
		})
	}
}

// TestNoMembersNoAction: with no control-plane node known, every pod would look stranded; nothing is done.
func TestNoMembersNoAction(t *testing.T) {
	f := newFixture(t, true, ownedAgent("a", "w-0", true, "10.0.1.99"))
	if err := f.client.Delete(context.Background(), fixtures.Node("cp-0", "", true)); err != nil {
		t.Fatal(err)
	}
	f.reconcile(t)
	if got := f.remaining(t); len(got) != 1 || f.dryRuns != 0 {
		t.Errorf("pods %v, %d dry runs; want nothing done", got, f.dryRuns)
	}
}
