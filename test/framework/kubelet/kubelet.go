// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

// Package kubelet stands for the kubelets of a test cluster's nodes, which cannot run here (no container runtime): it
// reports every pod bound to one of its nodes as running and ready, as kubelet does once the containers started and
// the readiness probe passed, and finishes the deletion of pods that are terminating, as kubelet does once their
// containers stopped. It does nothing else: no probes fail, no container restarts, no node goes NotReady unless a
// test says so. Kubernetes' own controllers and scheduler (kube-controller-manager, kube-scheduler) run for real.
package kubelet

import (
	"context"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Kubelets are the stand-ins for the kubelets of a set of nodes.
type Kubelets struct {
	client client.Client
	mu     sync.Mutex
	nodes  []string
}

// New returns the kubelets of no node yet.
func New(c client.Client) *Kubelets { return &Kubelets{client: c} }

// Register creates node as its kubelet registers it: labels and taints as given, plus the well-known labels kubelet
// sets itself (pkg/kubelet/kubelet_node_status.go initialNode), and the status a kubelet reports: Ready, and room for
// the pods of a test.
func (k *Kubelets) Register(ctx context.Context, node *corev1.Node) error {
	node = node.DeepCopy()
	SetLabels(node)
	status := node.Status
	if err := k.client.Create(ctx, node); err != nil {
		return err
	}
	ReportReady(&status)
	node.Status = status
	if err := k.client.Status().Update(ctx, node); err != nil {
		return err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.nodes = append(k.nodes, node.Name)
	return nil
}

// Remove deletes the node, as when it is taken out of the cluster; its pods are left to the controllers.
func (k *Kubelets) Remove(ctx context.Context, name string) error {
	k.mu.Lock()
	k.nodes = slices.DeleteFunc(k.nodes, func(n string) bool { return n == name })
	k.mu.Unlock()
	return client.IgnoreNotFound(k.client.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}))
}

func (k *Kubelets) runs(node string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Contains(k.nodes, node)
}

// Run starts the pods bound to the registered nodes and finishes their deletions until ctx ends, every 100 ms.
func (k *Kubelets) Run(ctx context.Context) {
	for ctx.Err() == nil {
		pods := &corev1.PodList{}
		if err := k.client.List(ctx, pods); err == nil {
			for i := range pods.Items {
				k.sync(ctx, &pods.Items[i])
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (k *Kubelets) sync(ctx context.Context, pod *corev1.Pod) {
	if pod.Spec.NodeName == "" || !k.runs(pod.Spec.NodeName) {
		return
	}
	if pod.DeletionTimestamp != nil {
		_ = client.IgnoreNotFound(k.client.Delete(ctx, pod, client.GracePeriodSeconds(0)))
		return
	}
	if pod.Status.Phase == corev1.PodRunning {
		return
	}
	ReportRunning(pod, true)
	_ = k.client.Status().Update(ctx, pod) // a conflict or a pod gone meanwhile: the next round sees it anew
}

// SetLabels sets the well-known labels kubelet sets on its node itself (pkg/kubelet/kubelet_node_status.go
// initialNode), which DaemonSets and the scheduler select on.
func SetLabels(node *corev1.Node) {
	if node.Labels == nil {
		node.Labels = map[string]string{}
	}
	node.Labels[corev1.LabelHostname] = node.Name
	node.Labels[corev1.LabelOSStable] = "linux"
	node.Labels[corev1.LabelArchStable] = "amd64"
}

// ReportReady sets the status a kubelet reports for its node once it runs: Ready, and room for the pods of a test.
func ReportReady(status *corev1.NodeStatus) {
	capacity := corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("8Gi"), corev1.ResourcePods: resource.MustParse("110"),
	}
	status.Capacity, status.Allocatable = capacity, capacity
	status.Conditions = []corev1.NodeCondition{{
		Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
		LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now(),
	}}
}

// ReportRunning sets the status a kubelet reports for pod once its containers started, and ready once their readiness
// probes passed.
func ReportRunning(pod *corev1.Pod, ready bool) {
	now := metav1.Now()
	pod.Status.Phase = corev1.PodRunning
	if pod.Status.StartTime == nil {
		pod.Status.StartTime = &now
	}
	readiness := corev1.ConditionFalse
	if ready {
		readiness = corev1.ConditionTrue
	}
	pod.Status.Conditions = []corev1.PodCondition{
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: corev1.ContainersReady, Status: readiness, LastTransitionTime: now},
		{Type: corev1.PodReady, Status: readiness, LastTransitionTime: now},
	}
	pod.Status.ContainerStatuses = nil
	for _, c := range pod.Spec.Containers {
		pod.Status.ContainerStatuses = append(pod.Status.ContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, Ready: ready, Started: new(true),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
		})
	}
}

// ReportTerminated sets the status a kubelet reports for a deleted pod once its containers stopped: a terminal phase
// whatever the restart policy, Succeeded when every container exited 0 (pkg/kubelet/kubelet_pods.go getPhase with
// podIsTerminal).
func ReportTerminated(pod *corev1.Pod, exitCode int32) {
	now := metav1.Now()
	pod.Status.Phase = corev1.PodFailed
	if exitCode == 0 {
		pod.Status.Phase = corev1.PodSucceeded
	}
	for i := range pod.Status.Conditions {
		if t := pod.Status.Conditions[i].Type; t == corev1.ContainersReady || t == corev1.PodReady {
			pod.Status.Conditions[i].Status, pod.Status.Conditions[i].LastTransitionTime = corev1.ConditionFalse, now
		}
	}
	pod.Status.ContainerStatuses = nil
	for _, c := range pod.Spec.Containers {
		pod.Status.ContainerStatuses = append(pod.Status.ContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, Started: new(false),
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: exitCode, FinishedAt: now}},
		})
	}
}
