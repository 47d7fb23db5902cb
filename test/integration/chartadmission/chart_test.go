// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

// Package chartadmission sends the objects of Cilium's real charts, upstream's for each supported version and Gardener's
// networking-cilium, through the webhooks' admission handlers as kube-apiserver would, and checks what comes back.
package chartadmission_test

import (
	"context"
	"encoding/json"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	admissionv1 "k8s.io/api/admission/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	extensionswebhook "github.com/gardener/gardener/extensions/pkg/webhook"
	testutils "github.com/gardener/gardener/pkg/utils/test"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/apiserverendpoints"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/cilium"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/scheme"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/ciliumchart"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/fixtures"
	"github.com/gardener/gardener-extension-cilium-selfhosted/webhook/apiserveraccess"
)

// admitter sends objects through the webhooks' admission handlers the way kube-apiserver would.
type admitter struct {
	t        *testing.T
	scheme   *runtime.Scheme
	webhooks []*extensionswebhook.Webhook
}

func newAdmitter(t *testing.T, objs ...client.Object) *admitter {
	t.Helper()
	s := scheme.New()
	mgr := testutils.FakeManager{Scheme: s, Client: fake.NewClientBuilder().WithScheme(s).WithObjects(objs...).Build()}
	a := &admitter{t: t, scheme: s}
	for _, add := range []func(manager.Manager) (*extensionswebhook.Webhook, error){
		apiserveraccess.AddAgentWebhook, apiserveraccess.AddOperatorWebhook, apiserveraccess.AddConfigWebhook,
	} {
		wh, err := add(mgr)
		if err != nil {
			t.Fatal(err)
		}
		a.webhooks = append(a.webhooks, wh)
	}
	return a
}

func selfHostedShoot() []client.Object {
	objs := []client.Object{fixtures.Cluster(fixtures.Shoot(true))}
	for _, n := range fixtures.Nodes() {
		objs = append(objs, n)
	}
	return objs
}

// admit sends obj on CREATE to every webhook whose rules and object selector match (as kube-apiserver does), applies
// each returned JSON patch with evanphx/json-patch and returns the result together with the number of patch
// operations.
func (a *admitter) admit(obj client.Object) (client.Object, int) {
	a.t.Helper()
	gvk, err := apiutil.GVKForObject(obj, a.scheme)
	if err != nil {
		a.t.Fatal(err)
	}
	raw, err := json.Marshal(obj)
	if err != nil {
		a.t.Fatal(err)
	}
	ops := 0
	for _, wh := range a.webhooks {
		if !a.matches(wh, obj, gvk.Kind) {
			continue
		}
		resp := wh.Webhook.Handle(context.Background(), admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
			UID: "test", Kind: metav1.GroupVersionKind(gvk), Operation: admissionv1.Create,
			Namespace: obj.GetNamespace(), Name: obj.GetName(), Object: runtime.RawExtension{Raw: raw},
		}})
		if !resp.Allowed {
			a.t.Fatalf("%s %s denied: %v", gvk.Kind, obj.GetName(), resp.Result)
		}
		if len(resp.Patches) == 0 {
			continue
		}
		ops += len(resp.Patches)
		patchJSON, err := json.Marshal(resp.Patches)
		if err != nil {
			a.t.Fatal(err)
		}
		patch, err := jsonpatch.DecodePatch(patchJSON)
		if err != nil {
			a.t.Fatal(err)
		}
		if raw, err = patch.Apply(raw); err != nil {
			a.t.Fatalf("applying the patch of %s to %s: %v", wh.Name, obj.GetName(), err)
		}
	}
	// A fresh object: unmarshalling into a copy of obj would keep whatever the patch removed.
	fresh, err := a.scheme.New(gvk)
	if err != nil {
		a.t.Fatal(err)
	}
	out := fresh.(client.Object)
	if err := json.Unmarshal(raw, out); err != nil {
		a.t.Fatal(err)
	}
	return out, ops
}

func (a *admitter) matches(wh *extensionswebhook.Webhook, obj client.Object, kind string) bool {
	typeMatches := false
	for _, t := range wh.Types {
		if gvk, _ := apiutil.GVKForObject(t.Obj, a.scheme); gvk.Kind == kind {
			typeMatches = true
		}
	}
	if !typeMatches || wh.NamespaceSelector.MatchLabels[corev1.LabelMetadataName] != obj.GetNamespace() {
		return false
	}
	if wh.ObjectSelector == nil {
		return true
	}
	selector, err := metav1.LabelSelectorAsSelector(wh.ObjectSelector)
	if err != nil {
		panic(err)
	}
	return selector.Matches(labels.Set(obj.GetLabels()))
}

// endpointsConfigMap is what the endpoints controller writes for the fixture nodes.
var endpointsConfigMap = map[string]map[string]string{apiserverendpoints.ConfigMapName: {
	apiserverendpoints.KeyAPIServerURLs:  fixtures.ControlPlaneURLs,
	apiserverendpoints.KeyKubeconfigPath: apiserverendpoints.KubeconfigPath,
}}

func verify(t *testing.T, what string, mutated, rendered client.Object, want ciliumchart.Want, hostAliases []string) {
	t.Helper()
	for _, p := range ciliumchart.VerifyPinned(ciliumchart.PodSpec(mutated), ciliumchart.PodSpec(rendered), want, hostAliases, endpointsConfigMap) {
		t.Errorf("%s: %s", what, p)
	}
}

// verifyPod checks a pod admitted on a control-plane node or elsewhere.
func verifyPod(t *testing.T, what, version string, mutated, rendered client.Object, controlPlane bool) {
	t.Helper()
	if controlPlane {
		verify(t, what, mutated, rendered, ciliumchart.WantLocal(version), nil)
	} else {
		verify(t, what, mutated, rendered, ciliumchart.WantByName(version), fixtures.ControlPlaneIPs)
	}
}

// TestRealChart runs the objects of Cilium's real chart, rendered for every supported version with an external
// k8sServiceHost (and k8s.apiServerURLs where the chart has it), through the webhooks.
func TestRealChart(t *testing.T) {
	for _, version := range ciliumchart.Versions {
		t.Run(version, func(t *testing.T) {
			rendered, err := ciliumchart.Render(version, ciliumchart.Values(version))
			if err != nil {
				t.Fatal(err)
			}
			testChart(t, rendered)
		})
	}
}

// TestGardenerChart runs the objects of Gardener's networking-cilium chart, rendered as that extension renders it for
// a self-hosted shoot without kube-proxy, through the webhooks. Its agent has no KUBERNETES_SERVICE_HOST of its own:
// it would use the one kubelet gives every pod, the `kubernetes` ClusterIP.
func TestGardenerChart(t *testing.T) {
	rendered, err := ciliumchart.RenderGardener(ciliumchart.GardenerVersion, ciliumchart.GardenerValues(ciliumchart.GardenerVersion))
	if err != nil {
		t.Fatal(err)
	}
	testChart(t, rendered)
}

// testChart admits every workload, pod and cilium-config of a rendered chart and checks what each gets.
func testChart(t *testing.T, rendered *ciliumchart.Objects) {
	version := rendered.Version
	if rendered.Envoy == nil {
		t.Fatal("the chart rendered no Envoy DaemonSet")
	}
	a := newAdmitter(t, append(selfHostedShoot(), rendered.Agent)...)

	// The extension caches only the pods labelled as part of Cilium (cmd/.../app cacheScope): the agent's, Envoy's
	// and the operator's must be.
	for _, w := range rendered.Workloads() {
		var labels map[string]string
		switch o := w.(type) {
		case *appsv1.DaemonSet:
			labels = o.Spec.Template.Labels
		case *appsv1.Deployment:
			labels = o.Spec.Template.Labels
		}
		if labels[cilium.LabelKeyPartOf] != cilium.LabelValuePartOf {
			t.Errorf("%s: its pods are labelled %v, without %s=%s", w.GetName(), labels, cilium.LabelKeyPartOf, cilium.LabelValuePartOf)
		}
	}
	for _, w := range rendered.Workloads() {
		mutated, ops := a.admit(w)
		if ops == 0 {
			t.Errorf("%s: no patch", w.GetName())
		}
		verify(t, w.GetName()+" template", mutated, w, ciliumchart.WantTemplate(version, fixtures.ControlPlaneURLs), nil)
		if _, again := a.admit(mutated); again != 0 {
			t.Errorf("%s: the second admission patched again (%d operations)", w.GetName(), again)
		}
	}

	config, _ := a.admit(rendered.Config)
	data := config.(*corev1.ConfigMap).Data
	if _, ok := data[cilium.FlagAPIServerURLs]; ok {
		t.Errorf("cilium-config still has %s", cilium.FlagAPIServerURLs)
	}
	if len(data) != len(rendered.Config.Data)-countKeys(rendered.Config.Data, cilium.APIServerFlags...) {
		t.Errorf("cilium-config lost unrelated keys")
	}
	if _, again := a.admit(config); again != 0 {
		t.Errorf("cilium-config: the second admission patched again")
	}

	// Pods as the controllers create them, from the rendered (not yet mutated) templates: the webhook may
	// have been unreachable when the template was applied.
	for _, ds := range []*appsv1.DaemonSet{rendered.Agent, rendered.Envoy} {
		for node, controlPlane := range map[string]bool{"cp-1": true, "worker-0": false, "unknown-node": false} {
			pod := ciliumchart.DaemonSetPod(ds, node)
			mutated, _ := a.admit(pod)
			verifyPod(t, ds.Name+" pod on "+node, version, mutated, pod, controlPlane)
			if _, again := a.admit(mutated); again != 0 {
				t.Errorf("%s pod on %s: the second admission patched again", ds.Name, node)
			}
		}
	}
	operatorPod := ciliumchart.DeploymentPod(rendered.Operator)
	mutated, _ := a.admit(operatorPod)
	verifyPod(t, "operator pod", version, mutated, operatorPod, false)

	scheduled := operatorPod.DeepCopy()
	scheduled.Spec.NodeName = "cp-2"
	mutated, _ = a.admit(scheduled)
	verifyPod(t, "operator pod on cp-2", version, mutated, scheduled, true)
}

func countKeys(data map[string]string, keys ...string) int {
	n := 0
	for _, k := range keys {
		if _, ok := data[k]; ok {
			n++
		}
	}
	return n
}

// TestNotSelfHosted: without a self-hosted Cluster, nothing is changed.
func TestNotSelfHosted(t *testing.T) {
	rendered, err := ciliumchart.Render("1.19.7", ciliumchart.Values("1.19.7"))
	if err != nil {
		t.Fatal(err)
	}
	for name, objs := range map[string][]client.Object{
		"no Cluster":      nil,
		"not self-hosted": {fixtures.Cluster(fixtures.Shoot(false))},
	} {
		a := newAdmitter(t, objs...)
		for _, obj := range []client.Object{rendered.Agent, rendered.Operator, rendered.Config, ciliumchart.DaemonSetPod(rendered.Agent, "cp-0")} {
			if _, ops := a.admit(obj); ops != 0 {
				t.Errorf("%s: %s %s was patched", name, obj.GetObjectKind().GroupVersionKind().Kind, obj.GetName())
			}
		}
	}
}
