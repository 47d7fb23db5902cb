// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

// Package hostileworker_test checks what root on one worker can write on the self-hosted shoot with the tokens it
// holds (Cilium's agent and operator, node-problem-detector, the node's kubelet and gardener-node-agent, each with
// the RBAC networking-cilium's chart and Gardener give it) against the chart's admission policies, beside the writes
// Gardener, kubelet and Cilium really make.
package hostileworker_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/Masterminds/semver/v3"
	"github.com/gardener/gardener/pkg/component/nodemanagement/nodeproblemdetector"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/ciliumchart"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/fixtures"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/resourcemanager"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	opts := testenv.Options{NodeRestriction: true, Prerequisites: []testenv.Prerequisite{ciliumchart.GardenerChart}}
	os.Exit(testenv.RunSuite(m, fixtures.Shoot(true), opts, setup))
}

// setup gives every writer of Nodes its RBAC as the real cluster has it and waits until the chart's policies hold.
func setup(ctx context.Context, e *testenv.Env) (func(), error) {
	env = e
	// Cilium's ServiceAccounts and ClusterRoles as networking-cilium's chart renders them.
	rendered, err := ciliumchart.RenderGardener(ciliumchart.GardenerVersion, ciliumchart.GardenerValues(ciliumchart.GardenerVersion))
	if err != nil {
		return nil, err
	}
	for _, obj := range rendered.All {
		switch obj.(type) {
		case *corev1.ServiceAccount, *rbacv1.ClusterRole, *rbacv1.ClusterRoleBinding:
			if err := client.IgnoreAlreadyExists(e.Client.Create(ctx, obj)); err != nil {
				return nil, err
			}
		}
	}
	// node-problem-detector's as Gardener deploys it: its component's ManagedResource, applied by Gardener's resource
	// manager.
	npd := nodeproblemdetector.New(e.Client, metav1.NamespaceSystem, nodeproblemdetector.Values{
		Image: "node-problem-detector", KubernetesVersion: semver.MustParse(fixtures.KubernetesVersion),
	})
	if err := npd.Deploy(ctx); err != nil {
		return nil, err
	}
	rm, err := resourcemanager.New(e.Config, e.Client, "")
	if err != nil {
		return nil, err
	}
	if err := rm.Reconcile(ctx, metav1.NamespaceSystem, nodeproblemdetector.ManagedResourceName); err != nil {
		return nil, fmt.Errorf("the resource manager applying node-problem-detector: %w", err)
	}
	for _, obj := range gardenerWriters() {
		if err := client.IgnoreAlreadyExists(e.Client.Create(ctx, obj)); err != nil {
			return nil, err
		}
	}
	return func() {}, waitForPolicies(ctx)
}

// gardenerWriters are the RBAC of Gardener's writers of Nodes that no component of this module renders, each as the
// named source grants it: gardener-node-agent, which the node-agent authorizer lets write its own Node
// (pkg/resourcemanager/webhook/nodeagentauthorizer authorizer.go; granted here for every Node, and the policies, not
// RBAC, tell the nodes apart); the resource manager's all-verbs ClusterRole (pkg/component/gardener/resourcemanager
// resource_manager.go); gardenlet's patch of nodes (charts/gardener/gardenlet clusterrole-gardenlet.yaml); and the
// kube-system/cluster-admin ServiceAccount gardenadm uses (pkg/component/kubernetes/adminaccess access.go).
func gardenerWriters() []client.Object {
	nodeWriter := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "test:node-agent"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes", "nodes/status"}, Verbs: []string{"get", "list", "watch", "patch", "update"}}},
	}
	all := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "test:gardener-resource-manager"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"*"}, Resources: []string{"*"}, Verbs: []string{"*"}}},
	}
	gardenlet := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "test:gardenlet"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch", "patch"}}},
	}
	bind := func(role string, subject rbacv1.Subject) *rbacv1.ClusterRoleBinding {
		return &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: role + ":" + subject.Name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects:   []rbacv1.Subject{subject},
		}
	}
	sa := func(name string) rbacv1.Subject {
		return rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: metav1.NamespaceSystem, Name: name}
	}
	return []client.Object{
		nodeWriter, all, gardenlet,
		bind(nodeWriter.Name, rbacv1.Subject{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: nodeAgentGroup}),
		bind(all.Name, sa("gardener-resource-manager")),
		bind(gardenlet.Name, sa("gardenlet")),
		bind("cluster-admin", sa("cluster-admin")),
	}
}

// waitForPolicies waits until kube-apiserver enforces the chart's Node policies, which it loads from its informers.
func waitForPolicies(ctx context.Context) error {
	agent, err := env.ClientAs(agentOn("worker-0"))
	if err != nil {
		return err
	}
	var last error
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		last = write{statusPatch: true, patch: labelControlPlane}.dryRun(ctx, agent, "worker-0")
		return apierrors.IsForbidden(last), nil
	})
	if err != nil {
		return errors.Join(fmt.Errorf("the chart's Node policies are not enforced"), last, err)
	}
	return nil
}
