// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package apiserveraccess

import (
	"context"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/scheme"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/fixtures"
)

func agentSpec() corev1.PodSpec {
	return corev1.PodSpec{Containers: []corev1.Container{{
		Name: "cilium-agent", Image: "quay.io/cilium/cilium:v1.19.7",
		Env: []corev1.EnvVar{env("KUBERNETES_SERVICE_HOST", "api.example.com")},
	}}}
}

func TestMutatorIgnores(t *testing.T) {
	objs := []client.Object{fixtures.Cluster(fixtures.Shoot(true))}
	for _, n := range fixtures.Nodes() {
		objs = append(objs, n)
	}
	m := NewMutator(fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(objs...).Build())

	ciliumLabels := map[string]string{"k8s-app": "cilium"}
	daemonSet := func(ns string, labels map[string]string) *appsv1.DaemonSet {
		return &appsv1.DaemonSet{
			ObjectMeta: metav1.ObjectMeta{Name: "cilium", Namespace: ns, Labels: labels},
			Spec:       appsv1.DaemonSetSpec{Template: corev1.PodTemplateSpec{Spec: agentSpec()}},
		}
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "cilium-x", Namespace: "kube-system", Labels: ciliumLabels}, Spec: agentSpec()}
	deleting := daemonSet("kube-system", ciliumLabels)
	deleting.DeletionTimestamp = &metav1.Time{}

	for name, tc := range map[string]struct{ newObj, oldObj client.Object }{
		"look-alike in another namespace": {daemonSet("default", ciliumLabels), nil},
		"other DaemonSet in kube-system":  {daemonSet("kube-system", map[string]string{"k8s-app": "calico-node"}), nil},
		"pod update":                      {pod, pod.DeepCopy()},
		"being deleted":                   {deleting, nil},
		"other ConfigMap":                 {&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "coredns", Namespace: "kube-system"}, Data: map[string]string{"k8s-api-server": "x"}}, nil},
		"cilium-config elsewhere":         {&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cilium-config", Namespace: "default"}, Data: map[string]string{"k8s-api-server": "x"}}, nil},
	} {
		before := tc.newObj.DeepCopyObject()
		if err := m.Mutate(context.Background(), tc.newObj, tc.oldObj); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if !equality.Semantic.DeepEqual(before, tc.newObj) {
			t.Errorf("%s: the object was changed", name)
		}
	}

	// The same DaemonSet in kube-system is changed: the cases above differ from it only in what they vary.
	ds := daemonSet("kube-system", ciliumLabels)
	if err := m.Mutate(context.Background(), ds, nil); err != nil {
		t.Fatal(err)
	}
	if equality.Semantic.DeepEqual(ds, daemonSet("kube-system", ciliumLabels)) {
		t.Error("the Cilium DaemonSet in kube-system was not changed")
	}
}

// TestJoiningControlPlaneNode: the DaemonSet controller creates a node's Cilium pod as soon as kubelet has registered
// the node, with the control-plane taint (gardener operatingsystemconfig.go) but before gardener-node-agent labels it
// (nodeagent operatingsystemconfig reconciler.go). The pod must already get its own node's kube-apiserver.
func TestJoiningControlPlaneNode(t *testing.T) {
	joining := fixtures.Node("cp-new", "10.0.1.20", true)
	delete(joining.Labels, "node-role.kubernetes.io/control-plane")
	objs := []client.Object{fixtures.Cluster(fixtures.Shoot(true)), joining}
	m := NewMutator(fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(objs...).Build())

	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", GenerateName: "cilium-", Labels: map[string]string{"k8s-app": "cilium"}},
		Spec: agentSpec()}
	pod.Spec.NodeName = "cp-new"
	if err := m.Mutate(context.Background(), pod, nil); err != nil {
		t.Fatal(err)
	}
	if e, _ := envNamed(pod.Spec.Containers[0], "CILIUM_K8S_API_SERVER_URLS"); e.Value != "https://localhost:443" {
		t.Errorf("the pod on a joining control-plane node got %+v, want its own kube-apiserver", e)
	}
	if len(pod.Spec.HostAliases) != 0 {
		t.Errorf("hostAliases %+v on a control-plane node", pod.Spec.HostAliases)
	}
}
