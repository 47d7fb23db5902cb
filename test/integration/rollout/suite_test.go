// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

// Package rollout_test rolls the extension's own workload out as a real cluster does: Kubernetes' kube-controller-manager
// (DaemonSet, Deployment, ReplicaSet and pod garbage-collection controllers) and kube-scheduler run against the suite's
// kube-apiserver; test/framework/kubelet stands for the kubelets, which cannot run here. Health is judged with Gardener's own
// functions, those its resource manager and gardenadm wait on.
package rollout_test

import (
	"context"
	"os"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/ciliumchart"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/fixtures"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/kubelet"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/testenv"
)

var (
	env      *testenv.Env
	kubelets *kubelet.Kubelets
	// Kubernetes' own components, whose logs a failing test shows.
	kubernetes *testenv.Kubernetes
)

func TestMain(m *testing.M) {
	os.Exit(testenv.RunSuite(m, fixtures.Shoot(true), testenv.Options{
		Prerequisites: []testenv.Prerequisite{testenv.KubernetesControllers, ciliumchart.GardenerChart},
	}, setup))
}

func setup(ctx context.Context, e *testenv.Env) (func(), error) {
	env = e
	kubelets = kubelet.New(e.Client)
	// The fixture's nodes have no kubelet: each test registers the nodes it needs.
	for _, node := range fixtures.Nodes() {
		if err := kubelets.Remove(ctx, node.Name); err != nil {
			return nil, err
		}
	}
	if err := e.CreateSystemPriorityClass(ctx); err != nil {
		return nil, err
	}
	var err error
	if kubernetes, err = e.RunKubernetes([]string{"daemonset-controller", "deployment-controller", "replicaset-controller", "pod-garbage-collector-controller"},
		// Pods of a node that is gone are deleted at once, not after the 12500 terminated pods podgc waits for.
		"--terminated-pod-gc-threshold=1"); err != nil {
		return nil, err
	}
	running, stop := context.WithCancel(ctx)
	go kubelets.Run(running)
	return func() {
		stop()
		kubernetes.Stop()
	}, nil
}

// logs are the tails of Kubernetes' components' logs, for a failing test.
func logs() string { return kubernetes.Logs() }

// registerControlPlaneNode registers a control-plane node as kubelet and gardener-node-agent make it (label and
// taint) and removes it when the test ends.
func registerControlPlaneNode(t *testing.T, name, ip string) {
	register(t, fixtures.Node(name, ip, true))
}

// registerWorker registers a worker node and removes it when the test ends.
func registerWorker(t *testing.T, name, ip string) { register(t, fixtures.Node(name, ip, false)) }

func register(t *testing.T, node *corev1.Node) {
	t.Helper()
	if err := kubelets.Register(context.Background(), node); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := kubelets.Remove(context.Background(), node.Name); err != nil {
			t.Error(err)
		}
	})
}

// pods lists the pods that match labels in namespace, by default the extension's.
func pods(ctx context.Context, labels map[string]string, namespace ...string) ([]corev1.Pod, error) {
	ns := testenv.ExtensionNamespace
	if len(namespace) > 0 {
		ns = namespace[0]
	}
	list := &corev1.PodList{}
	err := env.Client.List(ctx, list, client.InNamespace(ns), client.MatchingLabels(labels))
	return list.Items, err
}
