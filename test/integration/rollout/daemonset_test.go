// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package rollout_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gardener/gardener/pkg/utils/kubernetes/health"

	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/testenv"
)

// extension is the extension's DaemonSet as Gardener's resource manager applied it from the chart.
func extension(ctx context.Context) (*appsv1.DaemonSet, error) {
	ds := &appsv1.DaemonSet{}
	return ds, env.Client.Get(ctx, client.ObjectKey{Namespace: testenv.ExtensionNamespace, Name: testenv.ServiceAccountName}, ds)
}

// rolledOut waits until Gardener's health functions call the extension's DaemonSet healthy and not progressing
// (health.CheckDaemonSet, health.IsDaemonSetProgressing: what the resource manager's health controller reports and
// gardenadm waits for) with want pods, all available. While it waits, check sees every status.
func rolledOut(t *testing.T, want int32, check func(*testing.T, *appsv1.DaemonSet)) {
	t.Helper()
	var last string
	if err := testenv.WaitFor(context.Background(), 2*time.Minute, func(ctx context.Context) (bool, error) {
		ds, err := extension(ctx)
		if err != nil {
			return false, err
		}
		if check != nil {
			check(t, ds)
		}
		progressing, reason := health.IsDaemonSetProgressing(ds)
		unhealthy := health.CheckDaemonSet(ds)
		last = fmt.Sprintf("progressing %v (%s), health %v, status %+v", progressing, reason, unhealthy, ds.Status)
		return !progressing && unhealthy == nil && ds.Status.DesiredNumberScheduled == want && ds.Status.NumberAvailable == want, nil
	}); err != nil {
		t.Fatalf("the extension's DaemonSet is not rolled out to %d node(s): %v; last: %s\n%s", want, err, last, logs())
	}
}

// changeTemplate changes the pod template, as the resource manager applies a changed chart (a new image, gardenadm
// init's second pass with new values).
func changeTemplate(t *testing.T, revision string) {
	t.Helper()
	ctx := context.Background()
	ds, err := extension(ctx)
	if err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(ds.DeepCopy())
	metav1.SetMetaDataAnnotation(&ds.Spec.Template.ObjectMeta, "rollout.test/revision", revision)
	if err := env.Client.Patch(ctx, ds, patch); err != nil {
		t.Fatal(err)
	}
}

// failedDelete is the reason of the event the DaemonSet controller records when deleting a pod fails
// (k8s.io/kubernetes pkg/controller/controller_utils.go FailedDeletePodReason).
const failedDelete = "FailedDelete"

// atMostOneUnavailable is the promise of the chart's update strategy: one control-plane node at a time, so that with
// several the others keep serving the webhooks. Kubernetes keeps it unless deleting a pod fails: the DaemonSet
// controller then lowers its expectations as if the pod stayed (pkg/controller/daemon/daemon_controller.go syncNodes)
// and, when kube-apiserver had deleted it nonetheless (a timeout under load), may delete the next one before it sees
// the first go. That is Kubernetes', not the chart's: it is logged with the DaemonSet's FailedDelete event since the
// rollout began.
func atMostOneUnavailable(since time.Time) func(*testing.T, *appsv1.DaemonSet) {
	return func(t *testing.T, ds *appsv1.DaemonSet) {
		t.Helper()
		if ds.Status.ObservedGeneration != ds.Generation || ds.Status.DesiredNumberScheduled-ds.Status.NumberAvailable <= 1 {
			return
		}
		unavailable := fmt.Sprintf("%d of %d pods unavailable during the rollout", ds.Status.DesiredNumberScheduled-ds.Status.NumberAvailable, ds.Status.DesiredNumberScheduled)
		events := &corev1.EventList{}
		if err := env.Client.List(context.Background(), events, client.InNamespace(ds.Namespace)); err != nil {
			t.Errorf("%s; the DaemonSet's events: %v", unavailable, err)
			return
		}
		var seen []string
		failed := false
		for _, e := range events.Items {
			if e.InvolvedObject.UID != ds.UID || e.LastTimestamp.Time.Before(since.Truncate(time.Second)) {
				continue
			}
			seen = append(seen, e.Reason+": "+e.Message)
			failed = failed || e.Reason == failedDelete
		}
		if failed {
			t.Logf("%s after the DaemonSet controller failed to delete a pod: %v", unavailable, seen)
			return
		}
		t.Errorf("%s; the DaemonSet's events: %v", unavailable, seen)
	}
}

// goneWithNode waits until no pod of the extension is bound to node. The DaemonSet controller leaves the pods of a
// deleted node alone (it watches no Node deletions and deletes only unscheduled pods of missing nodes,
// pkg/controller/daemon/daemon_controller.go getUnscheduledPodsWithoutNode); Kubernetes' pod garbage collector
// deletes them once the node stayed missing for its 40 s quarantine (pkg/controller/podgc/gc_controller.go
// gcOrphaned, which looks every 20 s: up to 80 s), and the DaemonSet's status may count the node out before that.
func goneWithNode(t *testing.T, node string) {
	t.Helper()
	var left []string
	if err := testenv.WaitFor(context.Background(), 3*time.Minute, func(ctx context.Context) (bool, error) {
		// kube-apiserver selects the pods by spec.nodeName, as kubelet's own watch does.
		list := &corev1.PodList{}
		if err := env.Client.List(ctx, list, client.InNamespace(testenv.ExtensionNamespace),
			client.MatchingLabels{"app.kubernetes.io/name": testenv.ServiceAccountName}, client.MatchingFields{"spec.nodeName": node}); err != nil {
			return false, err
		}
		left = nil
		for _, p := range list.Items {
			left = append(left, p.Name)
		}
		return len(left) == 0, nil
	}); err != nil {
		t.Fatalf("pod(s) %v of the removed node %s are still there: %v\n%s", left, node, err, logs())
	}
}

// TestRolloutsFollowTheControlPlaneNodes: gardenadm init runs on the first control-plane node alone, and its second
// pass changes the extension's template; then the other control-plane nodes join, the template changes again, and a
// node is taken out. At every step the rollout completes by Gardener's health functions, with one pod per
// control-plane node there is, and never more than one unavailable while several run. (With a highly available
// control plane the chart's former Deployment had two replicas here and never completed on the first node:
// TestDeploymentDeadlocksOnFewerNodesThanReplicas.)
func TestRolloutsFollowTheControlPlaneNodes(t *testing.T) {
	registerControlPlaneNode(t, "cp-a", "10.0.1.20")
	rolledOut(t, 1, nil)
	changeTemplate(t, "init-second-pass")
	rolledOut(t, 1, nil)

	registerControlPlaneNode(t, "cp-b", "10.0.1.21")
	registerControlPlaneNode(t, "cp-c", "10.0.1.22")
	rolledOut(t, 3, nil)
	began := time.Now()
	changeTemplate(t, "new-image")
	rolledOut(t, 3, atMostOneUnavailable(began))

	if err := kubelets.Remove(context.Background(), "cp-c"); err != nil {
		t.Fatal(err)
	}
	goneWithNode(t, "cp-c")
	rolledOut(t, 2, nil)
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
