// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

// Package ciliumchart renders Cilium's real Helm chart, straight from the github.com/cilium/cilium module of a given
// version in the module cache, into typed objects, so that tests mutate exactly what Cilium ships.
package ciliumchart

import (
	"fmt"
	"path/filepath"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/cilium"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/scheme"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/helm"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/testenv"
)

// Versions are the Cilium releases whose charts the tests render: the last patch of each supported minor.
var Versions = []string{"1.17.8", "1.18.8", "1.19.7", "1.20.2"}

// ExternalHost is what the charts are rendered with as k8sServiceHost: the shoot's external API name, which on a
// self-hosted shoot resolves to the exposure VIP that Cilium itself announces.
const ExternalHost = "api.shoot.example.com"

// Objects are the rendered objects that the webhook handles.
type Objects struct {
	Version  string
	Agent    *appsv1.DaemonSet
	Envoy    *appsv1.DaemonSet // nil when the chart renders no standalone Envoy
	Operator *appsv1.Deployment
	Config   *corev1.ConfigMap
	// All is every rendered object that decodes into a known type, in install order.
	All []client.Object
}

// Module is github.com/cilium/cilium at version, for testenv.ModuleDir.
func Module(version string) string { return "github.com/cilium/cilium@v" + version }

// Values are the Helm values of a kube-proxy-free Cilium pointed at the external API name, as a shoot without this
// extension would get them, with the L2 announcer and the BGP control plane on (as test/framework/fixtures.NetworkConfig asks
// of networking-cilium), plus the 1.18+ API server URL list where the chart has it.
func Values(version string) map[string]any {
	values := map[string]any{
		"kubeProxyReplacement": true,
		"l2announcements":      map[string]any{"enabled": true},
		"bgpControlPlane":      map[string]any{"enabled": true},
		"k8sServiceHost":       ExternalHost,
		"k8sServicePort":       443,
		"envoy":                map[string]any{"enabled": true},
		"image":                map[string]any{"useDigest": false},
		"operator":             map[string]any{"image": map[string]any{"useDigest": false}},
	}
	if v, ok := cilium.VersionFromImage("cilium:v" + version); ok && v.SupportsAPIServerURLs() {
		values["k8s"] = map[string]any{"apiServerURLs": "https://" + ExternalHost + ":443"}
	}
	return values
}

// Render renders the chart of version with values into Cilium's namespace.
func Render(version string, values map[string]any) (*Objects, error) {
	dir, err := testenv.ModuleDir(Module(version))
	if err != nil {
		return nil, err
	}
	chart, err := helm.LoadDir(filepath.Join(dir, "install", "kubernetes", "cilium"))
	if err != nil {
		return nil, fmt.Errorf("loading the Cilium %s chart: %w", version, err)
	}
	// Cilium's own kinds (CRD instances, if any) are not in the scheme and not what the webhook handles.
	rendered, _, err := helm.Render(chart, "cilium", cilium.Namespace, values, scheme.New())
	if err != nil {
		return nil, fmt.Errorf("the Cilium %s chart: %w", version, err)
	}
	return collect("the Cilium "+version+" chart", version, rendered)
}

// collect sorts the rendered objects of a chart into Objects.
func collect(chart, version string, rendered []client.Object) (*Objects, error) {
	objs := &Objects{Version: version}
	for _, obj := range rendered {
		obj.SetNamespace(namespaceOf(obj))
		objs.add(obj)
	}
	if objs.Agent == nil || objs.Operator == nil || objs.Config == nil {
		return nil, fmt.Errorf("%s rendered no agent DaemonSet, operator Deployment or cilium-config", chart)
	}
	return objs, nil
}

func namespaceOf(obj client.Object) string {
	if obj.GetNamespace() != "" {
		return obj.GetNamespace()
	}
	switch obj.(type) {
	case *appsv1.DaemonSet, *appsv1.Deployment, *corev1.ConfigMap, *corev1.Service, *corev1.ServiceAccount, *corev1.Secret:
		return cilium.Namespace
	}
	return ""
}

func (o *Objects) add(obj client.Object) {
	o.All = append(o.All, obj)
	switch obj := obj.(type) {
	case *appsv1.DaemonSet:
		switch obj.Labels[cilium.LabelKeyApp] {
		case cilium.LabelValueAgent:
			o.Agent = obj
		case cilium.LabelValueEnvoy:
			o.Envoy = obj
		}
	case *appsv1.Deployment:
		if obj.Labels[cilium.LabelKeyOperator] == cilium.LabelValueOperator {
			o.Operator = obj
		}
	case *corev1.ConfigMap:
		if obj.Name == cilium.ConfigMapName {
			o.Config = obj
		}
	}
}

// Workloads are the DaemonSets and Deployment of the rendered chart.
func (o *Objects) Workloads() []client.Object {
	ws := []client.Object{o.Agent, o.Operator}
	if o.Envoy != nil {
		ws = append(ws, o.Envoy)
	}
	return ws
}

// DaemonSetPod is the pod that the DaemonSet controller would create for node: the template with a required node
// affinity on the node's name (kubernetes pkg/controller/daemon/util.ReplaceDaemonSetPodNodeNameNodeAffinity).
func DaemonSetPod(ds *appsv1.DaemonSet, node string) *corev1.Pod {
	pod := &corev1.Pod{
		ObjectMeta: *ds.Spec.Template.ObjectMeta.DeepCopy(),
		Spec:       *ds.Spec.Template.Spec.DeepCopy(),
	}
	pod.Namespace = ds.Namespace
	pod.GenerateName = ds.Name + "-"
	if pod.Spec.Affinity == nil {
		pod.Spec.Affinity = &corev1.Affinity{}
	}
	pod.Spec.Affinity.NodeAffinity = &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}},
		}}},
	}
	return pod
}

// DeploymentPod is the pod that the ReplicaSet controller would create: not yet scheduled, so without a node.
func DeploymentPod(d *appsv1.Deployment) *corev1.Pod {
	pod := &corev1.Pod{
		ObjectMeta: *d.Spec.Template.ObjectMeta.DeepCopy(),
		Spec:       *d.Spec.Template.Spec.DeepCopy(),
	}
	pod.Namespace = d.Namespace
	pod.GenerateName = d.Name + "-"
	return pod
}

// PodSpec is the pod spec of a DaemonSet, Deployment or Pod.
func PodSpec(obj client.Object) *corev1.PodSpec {
	switch o := obj.(type) {
	case *appsv1.DaemonSet:
		return &o.Spec.Template.Spec
	case *appsv1.Deployment:
		return &o.Spec.Template.Spec
	case *corev1.Pod:
		return &o.Spec
	}
	panic(fmt.Sprintf("%T has no pod spec", obj))
}
