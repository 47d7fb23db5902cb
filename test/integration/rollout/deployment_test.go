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
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gardener/gardener/pkg/utils/kubernetes/health"

	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/fixtures"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/testenv"
)

// asDeployment is the extension's pod as the chart shipped it before it became a DaemonSet: a Deployment whose
// replicas Gardener's resource manager sets to 2 with a highly available control plane, one pod per node (required
// anti-affinity), replaced one at a time and never beside the old one (maxSurge 0, host ports). It runs on the nodes
// labelled pool, with labels of its own, so that the DaemonSet's pods stay out of its way. Its progress deadline is
// shortened from the default 600 s so that the test sees it pass.
func asDeployment(ds *appsv1.DaemonSet, pool string) *appsv1.Deployment {
	labels := map[string]string{"rollout.test/app": "extension-as-deployment"}
	template := ds.Spec.Template.DeepCopy()
	template.Labels = labels
	template.Spec.NodeSelector = map[string]string{"rollout.test/pool": pool}
	template.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
			TopologyKey: corev1.LabelHostname, LabelSelector: &metav1.LabelSelector{MatchLabels: labels},
		}},
	}}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ds.Namespace, Name: "extension-as-deployment"},
		Spec: appsv1.DeploymentSpec{
			Replicas: new(int32(2)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: *template,
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType, RollingUpdate: &appsv1.RollingUpdateDeployment{
				MaxUnavailable: new(intstr.FromInt32(1)), MaxSurge: new(intstr.FromInt32(0)),
			}},
			ProgressDeadlineSeconds: new(int32(10)),
		},
	}
}

// TestDeploymentDeadlocksOnFewerNodesThanReplicas shows why the extension is a DaemonSet: as a Deployment of two
// replicas on the one node gardenadm init starts with, the second pod stays Pending under the anti-affinity; when the
// second pass changes the template, the controller may take away only the Pending pod, the new one cannot be scheduled
// beside the running old one, and the running one may not go before a new one is available. The rollout never ends:
// Gardener's IsDeploymentProgressing says progressing until the progress deadline, and then CheckDeployment says
// unhealthy, which is what fails gardenadm init.
func TestDeploymentDeadlocksOnFewerNodesThanReplicas(t *testing.T) {
	ctx := context.Background()
	node := fixtures.Node("first-node", "10.0.1.30", false)
	node.Labels["rollout.test/pool"] = "deployment"
	register(t, node)
	ds, err := extension(ctx)
	if err != nil {
		t.Fatal(err)
	}
	deployment := asDeployment(ds, "deployment")
	if err := env.Client.Create(ctx, deployment); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		_ = env.Client.Delete(ctx, deployment)
		// No garbage collector runs: the ReplicaSets and pods go by label.
		in, labels := client.InNamespace(deployment.Namespace), client.MatchingLabels(deployment.Spec.Selector.MatchLabels)
		_ = env.Client.DeleteAllOf(ctx, &appsv1.ReplicaSet{}, in, labels)
		_ = env.Client.DeleteAllOf(ctx, &corev1.Pod{}, in, labels, client.GracePeriodSeconds(0))
	})

	// One pod runs, the other cannot be scheduled.
	waitForPods(t, deployment, func(running, unschedulable []corev1.Pod) bool { return len(running) == 1 && len(unschedulable) == 1 })
	running := must(pods(ctx, deployment.Spec.Selector.MatchLabels))

	// gardenadm init's second pass changes the template.
	patch := client.MergeFrom(deployment.DeepCopy())
	metav1.SetMetaDataAnnotation(&deployment.Spec.Template.ObjectMeta, "rollout.test/revision", "init-second-pass")
	if err := env.Client.Patch(ctx, deployment, patch); err != nil {
		t.Fatal(err)
	}
	var last string
	if err := testenv.WaitFor(ctx, time.Minute, func(ctx context.Context) (bool, error) {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(deployment), deployment); err != nil {
			return false, err
		}
		progressing, reason := health.IsDeploymentProgressing(deployment)
		unhealthy := health.CheckDeployment(deployment)
		last = fmt.Sprintf("progressing %v (%s), health %v", progressing, reason, unhealthy)
		return deployment.Status.ObservedGeneration == deployment.Generation && progressing && unhealthy != nil, nil
	}); err != nil {
		t.Fatalf("the Deployment did not end stuck and unhealthy past its progress deadline: %v; last: %s\n%s", err, last, logs())
	}
	t.Logf("by Gardener's health functions: %s", last)
	// The deadlock: the old pod still runs, the new one cannot be scheduled.
	waitForPods(t, deployment, func(run, unschedulable []corev1.Pod) bool {
		return len(run) == 1 && run[0].Name == runningName(running) && len(unschedulable) == 1 &&
			unschedulable[0].Labels[appsv1.DefaultDeploymentUniqueLabelKey] != run[0].Labels[appsv1.DefaultDeploymentUniqueLabelKey]
	})
}

// runningName is the name of the one running pod among pods.
func runningName(pods []corev1.Pod) string {
	for _, p := range pods {
		if p.Status.Phase == corev1.PodRunning {
			return p.Name
		}
	}
	return ""
}

// waitForPods waits until the Deployment's pods, split into running ones and those kube-scheduler reported
// unschedulable, satisfy cond.
func waitForPods(t *testing.T, d *appsv1.Deployment, cond func(running, unschedulable []corev1.Pod) bool) {
	t.Helper()
	var last string
	if err := testenv.WaitFor(context.Background(), time.Minute, func(ctx context.Context) (bool, error) {
		all, err := pods(ctx, d.Spec.Selector.MatchLabels)
		if err != nil {
			return false, err
		}
		var running, unschedulable []corev1.Pod
		for _, p := range all {
			switch {
			case p.DeletionTimestamp != nil:
			case p.Status.Phase == corev1.PodRunning:
				running = append(running, p)
			case isUnschedulable(p):
				unschedulable = append(unschedulable, p)
			}
		}
		last = fmt.Sprintf("%d pods, %d running, %d unschedulable", len(all), len(running), len(unschedulable))
		return cond(running, unschedulable), nil
	}); err != nil {
		t.Fatalf("the Deployment's pods: %v; last: %s\n%s", err, last, logs())
	}
}

func isUnschedulable(p corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			return true
		}
	}
	return false
}
