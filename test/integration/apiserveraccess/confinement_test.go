// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package apiserveraccess_test

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdlatest "k8s.io/client-go/tools/clientcmd/api/latest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	resourcesv1alpha1 "github.com/gardener/gardener/pkg/apis/resources/v1alpha1"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/apiserverendpoints"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/cilium"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/testenv"
	"github.com/gardener/gardener-extension-cilium-selfhosted/webhook/apiserveraccess"
)

// TestExtensionWritesOnlyWhatItOwns: with the extension's own identity (the chart's ServiceAccount), writes to
// coredns' ConfigMap, to a Service it does not own, a new MutatingWebhookConfiguration and a change of another are
// refused: by RBAC where it can name the object, by the chart's policy where RBAC cannot name what it creates or
// deletes; a write to its own endpoints ConfigMap and its own webhook configuration is let through.
func TestExtensionWritesOnlyWhatItOwns(t *testing.T) {
	ctx := context.Background()
	asExtension := env.ExtensionClient(t)
	coredns := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: cilium.Namespace, Name: "coredns"}, Data: map[string]string{"Corefile": ".:53 {}"}}
	foreign := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: cilium.Namespace, Name: "someone-elses"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 443}}},
	}
	for _, obj := range []client.Object{coredns, foreign} {
		if err := env.Client.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), obj) })
	}
	addLabel := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"app.kubernetes.io/managed-by":"gardener-extension-cilium-selfhosted"}}}`))
	// RBAC names the one ConfigMap the extension patches; what RBAC cannot name, the chart's policy refuses.
	for what, tc := range map[string]struct {
		write    func() error
		byPolicy bool
	}{
		"patching coredns' ConfigMap": {func() error { return asExtension.Patch(ctx, coredns.DeepCopy(), addLabel) }, false},
		"creating a ConfigMap": {func() error {
			return asExtension.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: cilium.Namespace, Name: "rogue"}})
		}, true},
		"patching a foreign Service": {func() error { return asExtension.Patch(ctx, foreign.DeepCopy(), addLabel) }, true},
		"deleting a foreign Service": {func() error { return asExtension.Delete(ctx, foreign.DeepCopy()) }, true},
		"registering another webhook": {func() error {
			return asExtension.Create(ctx, &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "over-secrets"}})
		}, false},
		"changing another webhook configuration": {func() error {
			return asExtension.Patch(ctx, &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "someone-elses"}}, addLabel)
		}, false},
	} {
		err := tc.write()
		switch {
		case !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err):
			t.Errorf("%s as the extension: %v, want a refusal", what, err)
		case tc.byPolicy && !strings.Contains(err.Error(), "gardener-extension-cilium-selfhosted may write only"):
			t.Errorf("%s as the extension was refused, but not by the chart's policy: %v", what, err)
		}
	}
	for _, own := range []client.Object{
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: cilium.Namespace, Name: apiserverendpoints.ConfigMapName}},
		&admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: testenv.WebhookConfigName}},
	} {
		if err := asExtension.Patch(ctx, own, client.RawPatch(types.MergePatchType, []byte(`{}`))); err != nil {
			t.Errorf("patching its own %T: %v", own, err)
		}
	}
}

// TestExtensionWritesOnlyItsOwnWebhooks: with the extension's own identity, its MutatingWebhookConfiguration (which
// RBAC lets it patch by name) can take only the webhooks the extension writes: one on Secrets, one that calls another
// server, one for every namespace, one that fails closed, one under another name, one with match conditions of its
// own, none, one dropped, one with another timeout, side effects, match policy or object selector are refused by the
// chart's policy (kube-apiserver itself refuses a webhook twice and side effects Unknown), while its webhooks as they
// are pass (TestCARotation rotates the CA bundle under the policy).
func TestExtensionWritesOnlyItsOwnWebhooks(t *testing.T) {
	ctx := context.Background()
	asExtension := env.ExtensionClient(t)
	// write changes the first webhook of the configuration as it is now and sends the update as the extension.
	write := func(change func(*admissionregistrationv1.MutatingWebhookConfiguration, *admissionregistrationv1.MutatingWebhook)) error {
		mwc := &admissionregistrationv1.MutatingWebhookConfiguration{}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: testenv.WebhookConfigName}, mwc); err != nil {
			return err
		}
		if len(mwc.Webhooks) == 0 {
			return fmt.Errorf("%s has no webhooks", mwc.Name)
		}
		change(mwc, &mwc.Webhooks[0])
		return asExtension.Update(ctx, mwc)
	}
	for what, change := range map[string]func(*admissionregistrationv1.MutatingWebhookConfiguration, *admissionregistrationv1.MutatingWebhook){
		"a webhook on Secrets": func(_ *admissionregistrationv1.MutatingWebhookConfiguration, w *admissionregistrationv1.MutatingWebhook) {
			w.Rules[0].Resources = []string{"secrets"}
		},
		"a webhook on every kind of the core group": func(_ *admissionregistrationv1.MutatingWebhookConfiguration, w *admissionregistrationv1.MutatingWebhook) {
			w.Rules[0].Resources = []string{"*"}
		},
		"a webhook calling another server": func(_ *admissionregistrationv1.MutatingWebhookConfiguration, w *admissionregistrationv1.MutatingWebhook) {
			w.ClientConfig.URL = new("https://attacker.example.com/" + strings.Split(w.Name, ".")[0])
		},
		"a webhook in every namespace": func(_ *admissionregistrationv1.MutatingWebhookConfiguration, w *admissionregistrationv1.MutatingWebhook) {
			w.NamespaceSelector = &metav1.LabelSelector{}
		},
		"a webhook that fails closed": func(_ *admissionregistrationv1.MutatingWebhookConfiguration, w *admissionregistrationv1.MutatingWebhook) {
			w.FailurePolicy = new(admissionregistrationv1.Fail)
		},
		"a webhook with match conditions": func(_ *admissionregistrationv1.MutatingWebhookConfiguration, w *admissionregistrationv1.MutatingWebhook) {
			w.MatchConditions = []admissionregistrationv1.MatchCondition{{Name: "all", Expression: "true"}}
		},
		"the config webhook on every ConfigMap of kube-system": func(mwc *admissionregistrationv1.MutatingWebhookConfiguration, _ *admissionregistrationv1.MutatingWebhook) {
			for i, w := range mwc.Webhooks {
				if strings.HasPrefix(w.Name, apiserveraccess.ConfigWebhookName+".") {
					mwc.Webhooks[i].MatchConditions = nil
				}
			}
		},
		"the config webhook on another ConfigMap": func(mwc *admissionregistrationv1.MutatingWebhookConfiguration, _ *admissionregistrationv1.MutatingWebhook) {
			for i, w := range mwc.Webhooks {
				if strings.HasPrefix(w.Name, apiserveraccess.ConfigWebhookName+".") && len(w.MatchConditions) == 1 {
					mwc.Webhooks[i].MatchConditions[0].Expression = "object.metadata.name == 'coredns'"
				}
			}
		},
		"another webhook": func(mwc *admissionregistrationv1.MutatingWebhookConfiguration, w *admissionregistrationv1.MutatingWebhook) {
			other := w.DeepCopy()
			other.Name = "steal.example.com"
			mwc.Webhooks = append(mwc.Webhooks, *other)
		},
		"no webhooks": func(mwc *admissionregistrationv1.MutatingWebhookConfiguration, _ *admissionregistrationv1.MutatingWebhook) {
			mwc.Webhooks = nil
		},
		"a webhook dropped": func(mwc *admissionregistrationv1.MutatingWebhookConfiguration, _ *admissionregistrationv1.MutatingWebhook) {
			mwc.Webhooks = mwc.Webhooks[1:]
		},
		"a webhook that waits 30 s": func(_ *admissionregistrationv1.MutatingWebhookConfiguration, w *admissionregistrationv1.MutatingWebhook) {
			w.TimeoutSeconds = new(int32(30))
		},
		"a webhook with side effects outside dry runs": func(_ *admissionregistrationv1.MutatingWebhookConfiguration, w *admissionregistrationv1.MutatingWebhook) {
			w.SideEffects = new(admissionregistrationv1.SideEffectClassNoneOnDryRun)
		},
		"a webhook matching equivalent kinds": func(_ *admissionregistrationv1.MutatingWebhookConfiguration, w *admissionregistrationv1.MutatingWebhook) {
			w.MatchPolicy = new(admissionregistrationv1.Equivalent)
		},
		"webhooks for every object of their kinds": func(mwc *admissionregistrationv1.MutatingWebhookConfiguration, _ *admissionregistrationv1.MutatingWebhook) {
			for i := range mwc.Webhooks {
				mwc.Webhooks[i].ObjectSelector = &metav1.LabelSelector{}
			}
		},
	} {
		err := write(change)
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "gardener-extension-cilium-selfhosted-confine-webhook-configuration") {
			t.Errorf("%s as the extension: %v, want a refusal by the chart's policy", what, err)
		}
	}
	// The refusal names the webhook that breaks the pin.
	var slow string
	err := write(func(_ *admissionregistrationv1.MutatingWebhookConfiguration, w *admissionregistrationv1.MutatingWebhook) {
		w.TimeoutSeconds, slow = new(int32(30)), w.Name
	})
	if err == nil || !strings.Contains(err.Error(), "not so: "+slow) {
		t.Errorf("a webhook that waits 30 s: %v, want a refusal naming %s", err, slow)
	}
	if err := write(func(*admissionregistrationv1.MutatingWebhookConfiguration, *admissionregistrationv1.MutatingWebhook) {
	}); err != nil {
		t.Errorf("writing its webhooks as they are as the extension: %v", err)
	}
}

// TestExtensionMayOnlyRequestReconcileOfCiliumManagedResource: with the extension's own identity, networking-cilium's
// ManagedResource can be given `gardener.cloud/operation: reconcile` and nothing else: a change of its secretRefs
// (which decide what the resource manager applies), of another annotation or another operation is refused by the
// chart's policy, any other ManagedResource by RBAC.
func TestExtensionMayOnlyRequestReconcileOfCiliumManagedResource(t *testing.T) {
	ctx := context.Background()
	installChart(t)
	asExtension := env.ExtensionClient(t)
	mr := &resourcesv1alpha1.ManagedResource{ObjectMeta: metav1.ObjectMeta{Namespace: cilium.Namespace, Name: ciliumManagedResource}}
	patch := func(obj client.Object, body string) func() error {
		return func() error { return asExtension.Patch(ctx, obj, client.RawPatch(types.MergePatchType, []byte(body))) }
	}
	for what, tc := range map[string]struct {
		write    func() error
		byPolicy bool
	}{
		"rewriting its secretRefs":       {patch(mr.DeepCopy(), `{"spec":{"secretRefs":[{"name":"stolen"}]}}`), true},
		"adding another annotation":      {patch(mr.DeepCopy(), `{"metadata":{"annotations":{"resources.gardener.cloud/ignore":"true"}}}`), true},
		"requesting another operation":   {patch(mr.DeepCopy(), `{"metadata":{"annotations":{"gardener.cloud/operation":"migrate"}}}`), true},
		"requesting and changing labels": {patch(mr.DeepCopy(), `{"metadata":{"labels":{"x":"y"},"annotations":{"gardener.cloud/operation":"reconcile"}}}`), true},
		"patching another ManagedResource": {patch(&resourcesv1alpha1.ManagedResource{ObjectMeta: metav1.ObjectMeta{Namespace: cilium.Namespace, Name: "shoot-core"}},
			`{"metadata":{"annotations":{"gardener.cloud/operation":"reconcile"}}}`), false},
		"deleting it": {func() error { return asExtension.Delete(ctx, mr.DeepCopy()) }, false},
	} {
		err := tc.write()
		switch {
		case !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err):
			t.Errorf("%s as the extension: %v, want a refusal", what, err)
		case tc.byPolicy && !strings.Contains(err.Error(), "may only request a reconcile"):
			t.Errorf("%s as the extension was refused, but not by the chart's policy: %v", what, err)
		}
	}
	if err := patch(mr.DeepCopy(), `{"metadata":{"annotations":{"gardener.cloud/operation":"reconcile"}}}`)(); err != nil {
		t.Errorf("requesting a reconcile as the extension: %v", err)
	}
	if err := env.Client.Patch(ctx, mr.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"gardener.cloud/operation":null}}}`))); err != nil {
		t.Error(err)
	}
}

// TestExtensionDeletesOnlyCiliumPods: with the extension's own identity, deleting a pod that is not Cilium's and
// creating a pod for real are refused by the chart's policy; creating one as a dry run, as re-pinning checks the
// webhook, and deleting one of Cilium's pods pass.
func TestExtensionDeletesOnlyCiliumPods(t *testing.T) {
	ctx := context.Background()
	asExtension := env.ExtensionClient(t)
	pod := func(name string, labels map[string]string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: cilium.Namespace, Name: name, Labels: labels},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}},
		}
	}
	coredns := pod("coredns-confinement", map[string]string{"k8s-app": "kube-dns"})
	agent := pod("cilium-confinement", map[string]string{cilium.LabelKeyApp: cilium.LabelValueAgent})
	for _, p := range []*corev1.Pod{coredns, agent} {
		if err := env.Client.Create(ctx, p.DeepCopy()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), p.DeepCopy(), client.GracePeriodSeconds(0)) })
	}
	for what, err := range map[string]error{
		"deleting coredns' pod":   asExtension.Delete(ctx, coredns.DeepCopy()),
		"creating a pod for real": asExtension.Create(ctx, pod("rogue", map[string]string{cilium.LabelKeyApp: cilium.LabelValueAgent})),
	} {
		if !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "may delete only the pods of Cilium") {
			t.Errorf("%s as the extension: %v, want a refusal by the chart's policy", what, err)
		}
	}
	if err := asExtension.Create(ctx, pod("dry-run", map[string]string{cilium.LabelKeyApp: cilium.LabelValueAgent}), client.DryRunAll); err != nil {
		t.Errorf("a dry-run create as the extension: %v", err)
	}
	if err := asExtension.Delete(ctx, agent.DeepCopy()); err != nil {
		t.Errorf("deleting a Cilium pod as the extension: %v", err)
	}
}

// TestEndpointsConfigMapTakesOnlyItsShape: the endpoints ConfigMap, which every template-created Cilium pod loads as
// its kubeconfig, refuses from any writer, a cluster admin included, everything but the shape the extension writes:
// an exec entry, skipped TLS verification, another server name, the same kubeconfig in another spelling (JSON), a URL
// that is a name, another kubeconfig path, an extra key, binary data, and being made immutable or owned (which would
// freeze it or hand it to the garbage collector). The ConfigMap as the extension wrote it
// passes.
func TestEndpointsConfigMapTakesOnlyItsShape(t *testing.T) {
	ctx := context.Background()
	key := client.ObjectKey{Namespace: cilium.Namespace, Name: apiserverendpoints.ConfigMapName}
	current := &corev1.ConfigMap{}
	if err := env.Client.Get(ctx, key, current); err != nil {
		t.Fatal(err)
	}
	kubeconfig := current.Data[apiserverendpoints.KeyKubeconfig]
	if !strings.HasPrefix(kubeconfig, apiserverendpoints.KubeconfigPrefix) {
		t.Fatalf("the extension wrote a kubeconfig of another shape:\n%s", kubeconfig)
	}
	t.Cleanup(func() {
		restored := &corev1.ConfigMap{}
		if err := env.Client.Get(context.Background(), key, restored); err == nil && !maps.Equal(restored.Data, current.Data) {
			restored.Data, restored.BinaryData = current.Data, nil
			_ = env.Client.Update(context.Background(), restored)
		}
	})
	server, _, _ := strings.Cut(strings.TrimPrefix(kubeconfig, apiserverendpoints.KubeconfigPrefix), "\n")
	for what, change := range map[string]func(*corev1.ConfigMap){
		"an exec entry": func(cm *corev1.ConfigMap) {
			cm.Data[apiserverendpoints.KeyKubeconfig] = strings.Replace(kubeconfig, "  user:\n", "  user:\n    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: /bin/sh\n      args: [-c, id]\n", 1)
		},
		"skipped TLS verification": func(cm *corev1.ConfigMap) {
			cm.Data[apiserverendpoints.KeyKubeconfig] = strings.Replace(kubeconfig, "    server:", "    insecure-skip-tls-verify: true\n    server:", 1)
		},
		"another server name": func(cm *corev1.ConfigMap) {
			cm.Data[apiserverendpoints.KeyKubeconfig] = strings.Replace(kubeconfig, apiserverendpoints.ServerName, "evil.example.com", 1)
		},
		"the same kubeconfig in JSON": func(cm *corev1.ConfigMap) {
			cfg, err := clientcmd.Load([]byte(kubeconfig))
			if err != nil {
				t.Fatal(err)
			}
			out, err := runtime.Encode(clientcmdlatest.Codec, cfg)
			if err != nil {
				t.Fatal(err)
			}
			json, err := yaml.YAMLToJSON(out)
			if err != nil {
				t.Fatal(err)
			}
			cm.Data[apiserverendpoints.KeyKubeconfig] = string(json)
		},
		"a URL that is a name": func(cm *corev1.ConfigMap) {
			cm.Data[apiserverendpoints.KeyAPIServerURLs] = "https://evil.example.com:443"
			cm.Data[apiserverendpoints.KeyKubeconfig] = apiserverendpoints.KubeconfigPrefix + "https://evil.example.com:443" + apiserverendpoints.KubeconfigSuffix
		},
		"another server port": func(cm *corev1.ConfigMap) {
			cm.Data[apiserverendpoints.KeyAPIServerURLs] = strings.Replace(cm.Data[apiserverendpoints.KeyAPIServerURLs], ":443", ":6443", 1)
			cm.Data[apiserverendpoints.KeyKubeconfig] = strings.Replace(kubeconfig, server, strings.Replace(server, ":443", ":6443", 1), 1)
		},
		"another kubeconfig path": func(cm *corev1.ConfigMap) {
			cm.Data[apiserverendpoints.KeyKubeconfigPath] = "/etc/kubernetes/admin.conf"
		},
		"an extra key": func(cm *corev1.ConfigMap) { cm.Data["KUBECONFIG"] = "/tmp/kubeconfig" },
		"immutable":    func(cm *corev1.ConfigMap) { cm.Immutable = new(true) },
		"an owner": func(cm *corev1.ConfigMap) {
			cm.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Namespace", Name: "gone", UID: "0000"}}
		},
		"binary data": func(cm *corev1.ConfigMap) { cm.BinaryData = map[string][]byte{"kubeconfig.yaml": []byte(kubeconfig)} },
	} {
		cm := current.DeepCopy()
		change(cm)
		err := env.Client.Update(ctx, cm)
		if !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "endpoints-configmap-shape") {
			t.Errorf("%s, written by a cluster admin: %v, want a refusal by the chart's policy", what, err)
		}
	}
	if err := env.Client.Update(ctx, current.DeepCopy()); err != nil {
		t.Errorf("writing the ConfigMap as the extension wrote it: %v", err)
	}
}

// TestProberTokenOpensOnlyReadyz: what a thief of the extension's token can get through the probes' account: the
// extension may request tokens of its prober ServiceAccount and of no other (not its own, not Cilium's), and a prober
// token reads /readyz and nothing else: no Node, no Secret of the extension's namespace, no metrics, no token.
func TestProberTokenOpensOnlyReadyz(t *testing.T) {
	ctx := context.Background()
	asExtension := env.ExtensionClient(t)
	request := func(namespace, name string) (string, error) {
		tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: new(int64(600))}}
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
		err := asExtension.SubResource("token").Create(ctx, sa, tr)
		return tr.Status.Token, err
	}
	for _, other := range []client.ObjectKey{
		{Namespace: testenv.ExtensionNamespace, Name: testenv.ServiceAccountName},
		{Namespace: cilium.Namespace, Name: "cilium"},
	} {
		if _, err := request(other.Namespace, other.Name); !apierrors.IsForbidden(err) {
			t.Errorf("requesting a token of %s as the extension: %v, want Forbidden", other, err)
		}
	}
	token, err := request(testenv.ExtensionNamespace, testenv.ServiceAccountName+"-prober")
	if err != nil {
		t.Fatalf("requesting a token of the probes' account as the extension: %v", err)
	}
	config := rest.AnonymousClientConfig(env.Config)
	config.BearerToken = token
	clientset, err := kubernetes.NewForConfig(config)
	if err != nil {
		t.Fatal(err)
	}
	if body, err := clientset.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx); err != nil {
		t.Errorf("GET /readyz with the prober's token: %v %s", err, body)
	}
	for what, err := range map[string]error{
		"listing Nodes": func() error { _, err := clientset.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); return err }(),
		"listing the extension's Secrets": func() error {
			_, err := clientset.CoreV1().Secrets(testenv.ExtensionNamespace).List(ctx, metav1.ListOptions{})
			return err
		}(),
		"reading /metrics": func() error {
			_, err := clientset.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
			return err
		}(),
		"requesting another token": func() error {
			_, err := clientset.CoreV1().ServiceAccounts(testenv.ExtensionNamespace).CreateToken(ctx, testenv.ServiceAccountName+"-prober",
				&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: new(int64(600))}}, metav1.CreateOptions{})
			return err
		}(),
	} {
		if !apierrors.IsForbidden(err) {
			t.Errorf("%s with the prober's token: %v, want Forbidden", what, err)
		}
	}
}

// TestExtensionReadsOnlyItsConfigMaps: with the extension's own identity, of kube-system's ConfigMaps only Cilium's
// configuration and the endpoints ConfigMap can be read, and only the latter listed and watched, by its name: another
// ConfigMap, or all of them, are refused.
func TestExtensionReadsOnlyItsConfigMaps(t *testing.T) {
	ctx := context.Background()
	asExtension := env.ExtensionClient(t)
	coredns := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: cilium.Namespace, Name: "coredns-readable"}, Data: map[string]string{"Corefile": ".:53 {}"}}
	if err := env.Client.Create(ctx, coredns); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), coredns) })
	byName := func(name string) client.ListOption {
		return client.MatchingFieldsSelector{Selector: fields.OneTermEqualSelector("metadata.name", name)}
	}
	for what, err := range map[string]error{
		"reading another ConfigMap":         asExtension.Get(ctx, client.ObjectKeyFromObject(coredns), &corev1.ConfigMap{}),
		"listing kube-system's ConfigMaps":  asExtension.List(ctx, &corev1.ConfigMapList{}, client.InNamespace(cilium.Namespace)),
		"listing another ConfigMap by name": asExtension.List(ctx, &corev1.ConfigMapList{}, client.InNamespace(cilium.Namespace), byName(coredns.Name)),
	} {
		if !apierrors.IsForbidden(err) {
			t.Errorf("%s as the extension: %v, want Forbidden", what, err)
		}
	}
	for what, err := range map[string]error{
		"reading cilium-config": func() error {
			err := asExtension.Get(ctx, client.ObjectKey{Namespace: cilium.Namespace, Name: cilium.ConfigMapName}, &corev1.ConfigMap{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			return err
		}(),
		"listing the endpoints ConfigMap by name": asExtension.List(ctx, &corev1.ConfigMapList{}, client.InNamespace(cilium.Namespace), byName(apiserverendpoints.ConfigMapName)),
	} {
		if err != nil {
			t.Errorf("%s as the extension: %v", what, err)
		}
	}
}

// TestExtensionMintsNoLastingToken: with the extension's own identity, a Secret of type
// kubernetes.io/service-account-token for its ServiceAccount (which kube-apiserver's token controller would fill with
// a token that never expires) is refused by the chart's policy, whatever its type says; the Secrets its certificate
// management writes pass, as every suite shows.
func TestExtensionMintsNoLastingToken(t *testing.T) {
	ctx := context.Background()
	asExtension := env.ExtensionClient(t)
	annotated := map[string]string{corev1.ServiceAccountNameKey: testenv.ServiceAccountName}
	for what, secret := range map[string]*corev1.Secret{
		"a service-account token Secret": {ObjectMeta: metav1.ObjectMeta{Namespace: testenv.ExtensionNamespace, Name: "lasting", Annotations: annotated},
			Type: corev1.SecretTypeServiceAccountToken},
		"an Opaque Secret naming its ServiceAccount": {ObjectMeta: metav1.ObjectMeta{Namespace: testenv.ExtensionNamespace, Name: "lasting-opaque", Annotations: annotated}},
	} {
		err := asExtension.Create(ctx, secret)
		if err == nil {
			_ = env.Client.Delete(ctx, secret)
		}
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "confine-secret-writes") {
			t.Errorf("%s, written as the extension: %v, want a refusal by the chart's policy", what, err)
		}
	}
	plain := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: testenv.ExtensionNamespace, Name: "plain"}, Data: map[string][]byte{"k": []byte("v")}}
	if err := asExtension.Create(ctx, plain); err != nil {
		t.Errorf("an Opaque Secret in its namespace, written as the extension: %v", err)
	}
	_ = env.Client.Delete(ctx, plain)
}

// TestConfigWebhookSeesOnlyCiliumConfig: kube-apiserver calls the config webhook for `cilium-config` alone; its match
// condition keeps every other ConfigMap of kube-system (coredns', a tenant's) from the extension, which no object
// selector could (Cilium's chart gives cilium-config no labels). kube-apiserver counts each call a match condition
// spared a webhook (apiserver_admission_match_condition_exclusions_total, k8s.io/apiserver
// pkg/admission/plugin/webhook/generic/webhook.go), which only grows while this test runs.
func TestConfigWebhookSeesOnlyCiliumConfig(t *testing.T) {
	ctx := context.Background()
	const exclusions = "apiserver_admission_match_condition_exclusions_total"
	labels := map[string]string{
		"name": apiserveraccess.ConfigWebhookName + ".cilium-selfhosted.extensions.gardener.cloud",
		"kind": "webhook", "operation": "CREATE",
	}
	before, err := env.APIServerCounter(ctx, exclusions, labels)
	if err != nil {
		t.Fatal(err)
	}
	other := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: cilium.Namespace, Name: "tenant-settings"}, Data: map[string]string{"k": "v"}}
	if err := env.Client.Create(ctx, other, client.DryRunAll); err != nil {
		t.Fatal(err)
	}
	after, err := env.APIServerCounter(ctx, exclusions, labels)
	if err != nil {
		t.Fatal(err)
	}
	if after <= before {
		t.Errorf("kube-apiserver called the config webhook for ConfigMap %s/%s (%s %v: %v before, %v after)", other.Namespace, other.Name, exclusions, labels, before, after)
	}
}
