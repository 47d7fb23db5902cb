// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package apiserveraccess_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/apiserverendpoints"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/cilium"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/ciliumchart"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/fixtures"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/testenv"
)

// setReady sets the node's Ready condition as the node lifecycle controller would (status "" removes it, as the
// fixtures have it).
func setReady(ctx context.Context, name string, status corev1.ConditionStatus) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node := &corev1.Node{}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: name}, node); err != nil {
			return err
		}
		node.Status.Conditions = slices.DeleteFunc(node.Status.Conditions, func(c corev1.NodeCondition) bool { return c.Type == corev1.NodeReady })
		if status != "" {
			node.Status.Conditions = append(node.Status.Conditions, corev1.NodeCondition{Type: corev1.NodeReady, Status: status, Reason: "Test"})
		}
		return env.Client.Status().Update(ctx, node)
	})
}

// TestNotReadyControlPlaneNodeGoesLast: when a control-plane node stops being Ready (powered off, partitioned: the
// node lifecycle controller sets Unknown; kubelet reports False), the endpoints ConfigMap, the template kubeconfig's one
// server and every worker pod's aliases put the Ready nodes first; when it is Ready again, the order is by address.
func TestNotReadyControlPlaneNodeGoesLast(t *testing.T) {
	ctx := context.Background()
	rendered := renderWhenMutating(t)
	t.Cleanup(func() {
		for i := range fixtures.ControlPlaneIPs {
			if err := setReady(ctx, fmt.Sprintf("cp-%d", i), ""); err != nil {
				t.Error(err)
			}
		}
		if err := waitForURLs(ctx, fixtures.ControlPlaneURLs); err != nil {
			t.Errorf("the endpoints ConfigMap did not return to the fixtures' order: %v", err)
		}
	})
	for name, status := range map[string]corev1.ConditionStatus{"cp-0": corev1.ConditionUnknown, "cp-1": corev1.ConditionTrue, "cp-2": corev1.ConditionTrue} {
		if err := setReady(ctx, name, status); err != nil {
			t.Fatal(err)
		}
	}
	if err := waitForURLs(ctx, "https://10.0.1.11:443,https://10.0.1.12:443,https://10.0.1.10:443"); err != nil {
		t.Fatalf("the endpoints ConfigMap does not put the Ready nodes first: %v", err)
	}
	cm := &corev1.ConfigMap{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: cilium.Namespace, Name: apiserverendpoints.ConfigMapName}, cm); err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.Load([]byte(cm.Data[apiserverendpoints.KeyKubeconfig]))
	if err != nil {
		t.Fatal(err)
	}
	if server := cfg.Clusters[cfg.Contexts[cfg.CurrentContext].Cluster].Server; server != "https://10.0.1.11:443" {
		t.Errorf("the template kubeconfig's server is %s, not a Ready node's", server)
	}
	first := map[string]bool{}
	for i := range 20 {
		pod := ciliumchart.DaemonSetPod(rendered.Agent, fmt.Sprintf("worker-ready-%d", i))
		if err := testenv.WaitFor(ctx, 10*time.Second, func(ctx context.Context) (bool, error) {
			probe := pod.DeepCopy()
			if err := env.Client.Create(ctx, probe, client.DryRunAll); err != nil {
				return false, err
			}
			pod = probe
			return len(pod.Spec.HostAliases) == 3 && pod.Spec.HostAliases[2].IP == "10.0.1.10", nil
		}); err != nil {
			t.Fatalf("a worker pod's aliases do not put the node that is not Ready last: %+v (%v)", pod.Spec.HostAliases, err)
		}
		first[pod.Spec.HostAliases[0].IP] = true
	}
	if !first["10.0.1.11"] || !first["10.0.1.12"] || len(first) != 2 {
		t.Errorf("the worker pods start at %v, want both Ready nodes and only them", first)
	}
}
