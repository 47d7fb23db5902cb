// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package apiserveraccess

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	extensionswebhook "github.com/gardener/gardener/extensions/pkg/webhook"
	gardencorev1beta1 "github.com/gardener/gardener/pkg/apis/core/v1beta1"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/apiserverendpoints"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/cilium"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/selfhosted"
)

// NewMutator returns the mutator that keeps Cilium from depending on itself to reach kube-apiserver. reader should be
// the manager's cached client: it reads the Cluster, Nodes and the agent DaemonSet on every admission.
func NewMutator(reader client.Reader) extensionswebhook.Mutator {
	return &mutator{reader: reader, shoots: selfhosted.NewShootReader(reader)}
}

type mutator struct {
	reader client.Reader
	shoots *selfhosted.ShootReader
}

// Mutate changes nothing unless the object is one of Cilium's in kube-system, not being deleted, and the cluster is a
// self-hosted shoot: Cilium's pods at creation (a pod's environment is immutable afterwards), their DaemonSets and
// Deployments, and `cilium-config`, which Cilium's chart gives no labels (the webhook's match condition picks it by
// name, and so does this). These checks hold even if the MutatingWebhookConfiguration's selectors are edited.
func (m *mutator) Mutate(ctx context.Context, newObj, oldObj client.Object) error {
	if newObj.GetNamespace() != cilium.Namespace || newObj.GetDeletionTimestamp() != nil {
		return nil
	}
	var mutate func(*gardencorev1beta1.Shoot) error
	switch obj := newObj.(type) {
	case *corev1.Pod:
		if oldObj == nil && cilium.IsWorkload(obj.Labels) {
			mutate = func(*gardencorev1beta1.Shoot) error { return m.pinPod(ctx, obj) }
		}
	case *appsv1.DaemonSet:
		if cilium.IsWorkload(obj.Labels) {
			mutate = func(*gardencorev1beta1.Shoot) error { return m.pinTemplate(ctx, &obj.Spec.Template.Spec) }
		}
	case *appsv1.Deployment:
		if cilium.IsWorkload(obj.Labels) {
			mutate = func(*gardencorev1beta1.Shoot) error { return m.pinTemplate(ctx, &obj.Spec.Template.Spec) }
		}
	case *corev1.ConfigMap:
		if obj.Name == cilium.ConfigMapName {
			mutate = func(shoot *gardencorev1beta1.Shoot) error { m.mutateCiliumConfig(ctx, obj, shoot); return nil }
		}
	}
	if mutate == nil {
		return nil
	}
	shoot, err := m.shoots.Shoot(ctx)
	if err != nil || shoot == nil {
		return err
	}
	return mutate(shoot)
}

// pinTemplate gives a pod template the values of a pod whose node is not known: a template does not know its node, and
// referencing the endpoints ConfigMap keeps it unchanged when control-plane membership changes (no rollout).
func (m *mutator) pinTemplate(ctx context.Context, spec *corev1.PodSpec) error {
	version, err := m.version(ctx, spec)
	if err != nil {
		return err
	}
	pinPodSpec(spec, target{Version: version})
	return nil
}

func (m *mutator) pinPod(ctx context.Context, pod *corev1.Pod) error {
	version, err := m.version(ctx, &pod.Spec)
	if err != nil {
		return err
	}
	nodes := &corev1.NodeList{}
	// The cache's objects are only read here; a copy of every Node on every admission would be most of its cost.
	if err := m.reader.List(ctx, nodes, client.UnsafeDisableDeepCopy); err != nil {
		return fmt.Errorf("listing nodes: %w", err)
	}
	nodeName := nodeNameOf(pod)
	spreadKey := nodeName
	if spreadKey == "" {
		// The operator's pod has no node yet: a random start spreads its replicas.
		spreadKey = strconv.Itoa(rand.Int())
	}
	pinPodSpec(&pod.Spec, target{
		Pod:          true,
		ControlPlane: isControlPlane(nodes.Items, nodeName),
		Endpoints:    apiserverendpoints.FromNodes(nodes.Items),
		SpreadKey:    spreadKey,
		Version:      version,
	})
	return nil
}

// isControlPlane tells whether the named node is a control-plane node. An unknown or unnamed node counts as another
// node: the control-plane IPs work from anywhere, localhost only on the control plane.
func isControlPlane(nodes []corev1.Node, name string) bool {
	i := slices.IndexFunc(nodes, func(n corev1.Node) bool { return n.Name == name })
	return name != "" && i >= 0 && apiserverendpoints.IsControlPlaneNode(&nodes[i])
}

// version is the Cilium version of a workload: the tag of its own agent or operator image, else (Envoy's image carries
// Envoy's version) the tag of the agent DaemonSet's image. Unknown means current.
func (m *mutator) version(ctx context.Context, spec *corev1.PodSpec) (cilium.Version, error) {
	if v, ok := versionOfSpec(spec); ok {
		return v, nil
	}
	agents := &appsv1.DaemonSetList{}
	if err := m.reader.List(ctx, agents, client.InNamespace(cilium.Namespace),
		client.MatchingLabels{cilium.LabelKeyApp: cilium.LabelValueAgent}); err != nil {
		return cilium.Version{}, fmt.Errorf("listing Cilium agent DaemonSets: %w", err)
	}
	for i := range agents.Items {
		if v, ok := versionOfSpec(&agents.Items[i].Spec.Template.Spec); ok {
			return v, nil
		}
	}
	return cilium.Version{}, nil
}

func versionOfSpec(spec *corev1.PodSpec) (cilium.Version, bool) {
	for _, c := range slices.Concat(spec.Containers, spec.InitContainers) {
		if cilium.IsCiliumImage(c.Image) {
			if v, ok := cilium.VersionFromImage(c.Image); ok {
				return v, true
			}
		}
	}
	return cilium.Version{}, false
}
