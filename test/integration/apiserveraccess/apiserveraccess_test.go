// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package apiserveraccess_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	extensionsv1alpha1 "github.com/gardener/gardener/pkg/apis/extensions/v1alpha1"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/apiserverendpoints"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/cilium"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/ciliumchart"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/fixtures"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/resourcemanager"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/testenv"
	"github.com/gardener/gardener-extension-cilium-selfhosted/webhook/apiserveraccess"
)

// version is the Cilium release that Gardener's networking-cilium ships.
const version = "1.19.7"

// TestRegistration checks the MutatingWebhookConfiguration that the extension registered at start.
func TestRegistration(t *testing.T) {
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Name: testenv.WebhookConfigName}, mwc); err != nil {
		t.Fatal(err)
	}
	wantResources := map[string][]string{
		apiserveraccess.AgentWebhookName:    {"daemonsets", "pods"},
		apiserveraccess.OperatorWebhookName: {"deployments", "pods"},
		apiserveraccess.ConfigWebhookName:   {"configmaps"},
	}
	for _, wh := range mwc.Webhooks {
		name, _, _ := strings.Cut(wh.Name, ".")
		if wh.Name != name+".cilium-selfhosted.extensions.gardener.cloud" {
			t.Errorf("webhook name %s", wh.Name)
		}
		var resources []string
		for _, r := range wh.Rules {
			resources = append(resources, r.Resources...)
		}
		slices.Sort(resources)
		if !slices.Equal(resources, wantResources[name]) {
			t.Errorf("%s: resources %v, want %v", name, resources, wantResources[name])
		}
		if wh.FailurePolicy == nil || *wh.FailurePolicy != admissionregistrationv1.Ignore {
			t.Errorf("%s: failurePolicy %v, want Ignore", name, wh.FailurePolicy)
		}
		if wh.TimeoutSeconds == nil || *wh.TimeoutSeconds > 5 {
			t.Errorf("%s: timeoutSeconds %v, want <= 5", name, wh.TimeoutSeconds)
		}
		if wh.SideEffects == nil || *wh.SideEffects != admissionregistrationv1.SideEffectClassNone {
			t.Errorf("%s: sideEffects %v", name, wh.SideEffects)
		}
		if wh.NamespaceSelector == nil || wh.NamespaceSelector.MatchLabels[corev1.LabelMetadataName] != "kube-system" {
			t.Errorf("%s: namespaceSelector %v", name, wh.NamespaceSelector)
		}
		if wh.ClientConfig.URL == nil || !strings.HasPrefix(*wh.ClientConfig.URL, "https://127.0.0.1:") || !strings.HasSuffix(*wh.ClientConfig.URL, "/"+name) {
			t.Errorf("%s: clientConfig.url %v", name, wh.ClientConfig.URL)
		}
		if name != apiserveraccess.ConfigWebhookName && wh.ObjectSelector == nil {
			t.Errorf("%s: no objectSelector", name)
		}
		if !slices.Equal(wh.MatchConditions, apiserveraccess.MatchConditions[name]) {
			t.Errorf("%s: matchConditions %v, want %v", name, wh.MatchConditions, apiserveraccess.MatchConditions[name])
		}
		delete(wantResources, name)
	}
	if len(wantResources) != 0 {
		t.Errorf("webhooks missing: %v", wantResources)
	}
}

// endpoints reads the endpoints ConfigMap as the kubelet would resolve it.
func endpoints(t *testing.T) map[string]map[string]string {
	t.Helper()
	cm := &corev1.ConfigMap{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: cilium.Namespace, Name: apiserverendpoints.ConfigMapName}, cm); err != nil {
		t.Fatal(err)
	}
	return map[string]map[string]string{cm.Name: cm.Data}
}

// verifyPod checks how the containers of a pod admitted on a control-plane node or elsewhere reach kube-apiserver, and
// that the hostAliases of a pod elsewhere resolve the server name to every control-plane node.
func verifyPod(t *testing.T, what string, pod, rendered *corev1.Pod, controlPlane bool, cms map[string]map[string]string) {
	t.Helper()
	want, wantAliases := ciliumchart.WantByName(version), fixtures.ControlPlaneIPs
	if controlPlane {
		want, wantAliases = ciliumchart.WantLocal(version), nil
	}
	for _, p := range ciliumchart.VerifyAdmitted(&pod.Spec, &rendered.Spec, want, wantAliases, cms) {
		t.Errorf("%s: %s", what, p)
	}
}

// template is what every template gets.
var template = ciliumchart.WantTemplate(version, fixtures.ControlPlaneURLs)

// waitUntilMutating dry-runs the creation of the agent DaemonSet until the webhook changes it. Admission is
// failurePolicy Ignore, so "unchanged" means nothing unless the webhook demonstrably answers right before.
func waitUntilMutating(t *testing.T, agent *appsv1.DaemonSet) {
	t.Helper()
	if err := testenv.WaitFor(context.Background(), 30*time.Second, func(ctx context.Context) (bool, error) {
		probe := agent.DeepCopy()
		probe.Name = "probe-" + agent.Name
		if err := env.Client.Create(ctx, probe, client.DryRunAll); err != nil {
			return false, err
		}
		return len(ciliumchart.VerifyEnv(ciliumchart.PodSpec(probe), ciliumchart.PodSpec(agent), template, endpoints(t))) == 0, nil
	}); err != nil {
		t.Fatalf("the webhook does not mutate the agent DaemonSet: %v", err)
	}
}

// renderWhenMutating renders Cilium's chart once the webhook mutates its agent DaemonSet.
func renderWhenMutating(t *testing.T) *ciliumchart.Objects {
	t.Helper()
	rendered, err := ciliumchart.Render(version, ciliumchart.Values(version))
	if err != nil {
		t.Fatal(err)
	}
	waitUntilMutating(t, rendered.Agent)
	return rendered
}

var (
	installMu sync.Mutex
	installed *ciliumchart.Objects
)

// The ManagedResource in which networking-cilium delivers Cilium's chart to the shoot's resource manager, and its
// origin (managedresources.CreateForShoot in networking-cilium's actuator).
const (
	ciliumManagedResource       = "extension-networking-cilium-config"
	ciliumManagedResourceOrigin = "extension-networking-cilium"
)

// shootResourceManager is the shoot's resource manager (class ""), which applies what extensions deliver.
func shootResourceManager(t *testing.T) *resourcemanager.ResourceManager {
	t.Helper()
	rm, err := resourcemanager.New(env.Config, env.Client, "")
	if err != nil {
		t.Fatal(err)
	}
	return rm
}

// installChart delivers the objects of Cilium's chart as networking-cilium does, in a ManagedResource applied by
// Gardener's resource manager, once the webhook mutates, once for all tests that need them, and returns them as
// rendered.
func installChart(t *testing.T) *ciliumchart.Objects {
	t.Helper()
	installMu.Lock()
	defer installMu.Unlock()
	if installed != nil {
		return installed
	}
	rendered := renderWhenMutating(t)
	data, err := resourcemanager.Serialize(rendered.All...)
	if err != nil {
		t.Fatal(err)
	}
	if err := shootResourceManager(t).DeployForShoot(context.Background(), cilium.Namespace, ciliumManagedResource, ciliumManagedResourceOrigin, data); err != nil {
		t.Fatalf("the resource manager applying Cilium's chart: %v", err)
	}
	installed = rendered
	return installed
}

// storedAgent is the agent DaemonSet of installChart as kube-apiserver stores it.
func storedAgent(t *testing.T) *appsv1.DaemonSet {
	t.Helper()
	agent := installChart(t).Agent.DeepCopy()
	if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(agent), agent); err != nil {
		t.Fatal(err)
	}
	return agent
}

// TestCiliumIsPinned creates the objects of Cilium's chart and their pods through the API server and reads them back.
func TestCiliumIsPinned(t *testing.T) {
	ctx := context.Background()
	rendered := installChart(t)

	cms := endpoints(t)
	for _, w := range rendered.Workloads() {
		stored := w.DeepCopyObject().(client.Object)
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(w), stored); err != nil {
			t.Fatal(err)
		}
		for _, p := range ciliumchart.VerifyEnv(ciliumchart.PodSpec(stored), ciliumchart.PodSpec(w), template, cms) {
			t.Errorf("%s template: %s", w.GetName(), p)
		}
	}

	config := &corev1.ConfigMap{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(rendered.Config), config); err != nil {
		t.Fatal(err)
	}
	if _, ok := config.Data[cilium.FlagAPIServerURLs]; ok {
		t.Errorf("cilium-config still has %s", cilium.FlagAPIServerURLs)
	}
	if len(config.Data) != len(rendered.Config.Data)-1 {
		t.Errorf("cilium-config has %d keys, want %d", len(config.Data), len(rendered.Config.Data)-1)
	}

	// Pods as the controllers create them, from the stored (mutated) templates and from the rendered ones, as when
	// the webhook was unreachable while the template was applied.
	stored := storedAgent(t)
	for _, tc := range []struct {
		name         string
		pod          *corev1.Pod
		controlPlane bool
	}{
		{"agent on cp-1", ciliumchart.DaemonSetPod(stored, "cp-1"), true},
		{"agent on worker-0", ciliumchart.DaemonSetPod(stored, "worker-0"), false},
		{"agent from the rendered template on cp-2", ciliumchart.DaemonSetPod(rendered.Agent, "cp-2"), true},
		{"agent from the rendered template on worker-1", ciliumchart.DaemonSetPod(rendered.Agent, "worker-1"), false},
		{"envoy on cp-0", ciliumchart.DaemonSetPod(rendered.Envoy, "cp-0"), true},
		{"operator, not yet scheduled", ciliumchart.DeploymentPod(rendered.Operator), false},
	} {
		pod := tc.pod.DeepCopy()
		if err := env.Client.Create(ctx, pod); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
			t.Fatal(err)
		}
		verifyPod(t, tc.name, pod, tc.pod, tc.controlPlane, cms)
	}
}

// TestUnrelatedObjectsAreUnchanged: a DaemonSet in kube-system that is not Cilium's, and Cilium look-alikes in another
// namespace, pass unchanged.
func TestUnrelatedObjectsAreUnchanged(t *testing.T) {
	ctx := context.Background()
	rendered, err := ciliumchart.Render(version, ciliumchart.Values(version))
	if err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "look-alike"}}); err != nil {
		t.Fatal(err)
	}

	calico := rendered.Agent.DeepCopy()
	calico.Name, calico.Labels = "calico-node", map[string]string{"k8s-app": "calico-node"}
	calico.Spec.Selector.MatchLabels, calico.Spec.Template.Labels = calico.Labels, calico.Labels
	elsewhere := []client.Object{rendered.Agent.DeepCopy(), rendered.Operator.DeepCopy(), rendered.Config.DeepCopy()}
	for _, obj := range elsewhere {
		obj.SetNamespace("look-alike")
	}

	waitUntilMutating(t, rendered.Agent)
	for _, obj := range append([]client.Object{calico}, elsewhere...) {
		before := obj.DeepCopyObject().(client.Object)
		if err := env.Client.Create(ctx, obj, client.DryRunAll); err != nil {
			t.Fatal(err)
		}
		if b, ok := before.(*corev1.ConfigMap); ok {
			if !equality.Semantic.DeepEqual(b.Data, obj.(*corev1.ConfigMap).Data) {
				t.Errorf("ConfigMap %s/%s changed", obj.GetNamespace(), obj.GetName())
			}
			continue
		}
		for _, c := range slices.Concat(ciliumchart.PodSpec(obj).InitContainers, ciliumchart.PodSpec(obj).Containers) {
			i := slices.IndexFunc(slices.Concat(ciliumchart.PodSpec(before).InitContainers, ciliumchart.PodSpec(before).Containers), func(o corev1.Container) bool { return o.Name == c.Name })
			o := slices.Concat(ciliumchart.PodSpec(before).InitContainers, ciliumchart.PodSpec(before).Containers)[i]
			if !equality.Semantic.DeepEqual(o.Env, c.Env) || !slices.Equal(o.Args, c.Args) {
				t.Errorf("%T %s/%s: container %s changed", obj, obj.GetNamespace(), obj.GetName(), c.Name)
			}
		}
	}
}

// TestNotSelfHosted: once the Cluster is not a self-hosted shoot, Cilium's objects pass unchanged; once it is again,
// they are pinned again.
func TestNotSelfHosted(t *testing.T) {
	ctx := context.Background()
	rendered, err := ciliumchart.Render(version, ciliumchart.Values(version))
	if err != nil {
		t.Fatal(err)
	}
	setSelfHosted := func(selfHosted bool) {
		t.Helper()
		cluster := fixtures.Cluster(fixtures.Shoot(selfHosted))
		current := &extensionsv1alpha1.Cluster{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(cluster), current); err != nil {
			t.Fatal(err)
		}
		current.Spec = cluster.Spec
		if err := env.Client.Update(ctx, current); err != nil {
			t.Fatal(err)
		}
	}
	waitUntilMutating(t, rendered.Agent)
	setSelfHosted(false)
	defer func() { setSelfHosted(true); waitUntilMutating(t, rendered.Agent) }()

	if err := testenv.WaitFor(ctx, 30*time.Second, func(ctx context.Context) (bool, error) {
		probe := rendered.Agent.DeepCopy()
		probe.Name = "probe-not-self-hosted"
		if err := env.Client.Create(ctx, probe, client.DryRunAll); err != nil {
			return false, err
		}
		return equality.Semantic.DeepEqual(probe.Spec.Template.Spec.Containers[0].Env, rendered.Agent.Spec.Template.Spec.Containers[0].Env), nil
	}); err != nil {
		t.Errorf("the agent DaemonSet is still mutated on a shoot that is not self-hosted: %v", err)
	}
}

// TestControlPlaneMembership: a new control-plane node reaches the endpoints ConfigMap, and Cilium's templates stay
// as they are, so no agent restarts.
func TestControlPlaneMembership(t *testing.T) {
	ctx := context.Background()
	agent := storedAgent(t)

	newNode := fixtures.Node("cp-3", "10.0.1.13", true)
	if err := env.CreateNode(ctx, newNode); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := env.Client.Delete(ctx, newNode); err != nil && !apierrors.IsNotFound(err) {
			t.Error(err)
		}
		if err := waitForURLs(ctx, fixtures.ControlPlaneURLs); err != nil {
			t.Errorf("the endpoints ConfigMap did not drop cp-3: %v", err)
		}
	}()

	if err := waitForURLs(ctx, fixtures.ControlPlaneURLs+",https://10.0.1.13:443"); err != nil {
		t.Fatalf("the endpoints ConfigMap did not take up cp-3: %v", err)
	}
	after := &appsv1.DaemonSet{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(agent), after); err != nil {
		t.Fatal(err)
	}
	if after.Generation != agent.Generation || !equality.Semantic.DeepEqual(after.Spec.Template, agent.Spec.Template) {
		t.Error("the agent template changed with the control-plane membership")
	}
}

func waitForURLs(ctx context.Context, urls string) error {
	return testenv.WaitFor(ctx, 30*time.Second, func(ctx context.Context) (bool, error) {
		cm := &corev1.ConfigMap{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: cilium.Namespace, Name: apiserverendpoints.ConfigMapName}, cm); err != nil {
			return false, err
		}
		if got := cm.Data[apiserverendpoints.KeyAPIServerURLs]; got != urls {
			return false, fmt.Errorf("urls are %q", got)
		}
		return true, nil
	})
}

// TestJoiningControlPlaneNode: kubelet registers a control-plane node with the control-plane taint (gardener
// pkg/component/extensions/operatingsystemconfig/operatingsystemconfig.go, kubelet's RegisterWithTaints) and the
// DaemonSet controller creates its Cilium pod right away; gardener-node-agent labels the node only later
// (pkg/nodeagent/controller/operatingsystemconfig/reconciler.go). The pod must already talk to its own kube-apiserver.
// Other nodes' Cilium must not use it before the label: any kubelet may register with that taint (NodeRestriction
// checks labels only), so a node with the taint alone is in neither the endpoints ConfigMap nor a worker pod's
// aliases; with the label it is in both.
func TestJoiningControlPlaneNode(t *testing.T) {
	ctx := context.Background()
	rendered := renderWhenMutating(t)

	joining := fixtures.Node("cp-joining", "10.0.1.14", true)
	delete(joining.Labels, "node-role.kubernetes.io/control-plane")
	if err := env.CreateNode(ctx, joining); err != nil {
		t.Fatal(err)
	}
	// The node goes again, and the tests that follow see the fixtures' control plane once the endpoints say so.
	defer func() {
		if err := env.Client.Delete(ctx, joining); err != nil && !apierrors.IsNotFound(err) {
			t.Error(err)
		}
		if err := waitForURLs(ctx, fixtures.ControlPlaneURLs); err != nil {
			t.Error(err)
		}
	}()
	if err := testenv.WaitFor(ctx, 30*time.Second, func(ctx context.Context) (bool, error) {
		probe := ciliumchart.DaemonSetPod(rendered.Agent, joining.Name)
		if err := env.Client.Create(ctx, probe, client.DryRunAll); err != nil {
			return false, err
		}
		e := ciliumchart.ResolveEnv(probe.Spec.Containers[0].Env, nil)
		return e[cilium.EnvAPIServerURLs] == apiserverendpoints.LocalURL, fmt.Errorf("the agent pod got %q", e[cilium.EnvAPIServerURLs])
	}); err != nil {
		t.Errorf("the pod on a control-plane node without its label yet does not use its own kube-apiserver: %v", err)
	}
	// The webhook has seen the node (above); nothing else may use it yet.
	if err := waitForURLs(ctx, fixtures.ControlPlaneURLs); err != nil {
		t.Errorf("the endpoints ConfigMap with a tainted, unlabelled node: %v", err)
	}
	worker := ciliumchart.DaemonSetPod(rendered.Agent, "worker-0")
	if err := env.Client.Create(ctx, worker, client.DryRunAll); err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(worker.Spec.HostAliases, func(a corev1.HostAlias) bool { return a.IP == "10.0.1.14" }) {
		t.Errorf("a worker's pod got the tainted, unlabelled node in its hostAliases: %v", worker.Spec.HostAliases)
	}
	// gardener-node-agent labels it: now it is a member.
	if err := env.Client.Patch(ctx, joining, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"node-role.kubernetes.io/control-plane":""}}}`))); err != nil {
		t.Fatal(err)
	}
	if err := waitForURLs(ctx, fixtures.ControlPlaneURLs+",https://10.0.1.14:443"); err != nil {
		t.Errorf("the endpoints ConfigMap once the node is labelled: %v", err)
	}
}

// TestWebhookServesTLS12AndNewerOnly dials the registered webhook URL with TLS 1.1 and with TLS 1.2, and offers HTTP/2,
// which the server declines.
func TestWebhookServesTLS12AndNewerOnly(t *testing.T) {
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Name: testenv.WebhookConfigName}, mwc); err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(*mwc.Webhooks[0].ClientConfig.URL)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(mwc.Webhooks[0].ClientConfig.CABundle) {
		t.Fatal("no CA in the caBundle")
	}
	// Offered HTTP/2, the server settles on HTTP/1.1.
	conn, err := tls.Dial("tcp", u.Host, &tls.Config{RootCAs: roots, NextProtos: []string{"h2", "http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	if p := conn.ConnectionState().NegotiatedProtocol; p != "http/1.1" {
		t.Errorf("the webhook server negotiated %q, want http/1.1 only", p)
	}
	conn.Close()
	for _, tc := range []struct {
		version uint16
		ok      bool
	}{{tls.VersionTLS11, false}, {tls.VersionTLS12, true}, {tls.VersionTLS13, true}} {
		conn, err := tls.Dial("tcp", u.Host, &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS10, MaxVersion: tc.version})
		if err == nil {
			conn.Close()
		}
		if (err == nil) != tc.ok {
			t.Errorf("TLS version %x: handshake error %v, want success %v", tc.version, err, tc.ok)
		}
	}
}

// TestWebhookDown: with the extension down, Cilium pods are still admitted (failurePolicy Ignore) and, from the
// mutated template, still avoid the external name; once it is back, the next admission pins the pod again.
func TestWebhookDown(t *testing.T) {
	ctx := context.Background()
	agent := storedAgent(t)
	env.Extensions().Stop(ctx, false)
	restarted := false
	defer func() {
		if !restarted {
			_ = env.Extensions().StartAgain()
		}
	}()

	cms := endpoints(t)
	for _, node := range []string{"cp-2", "worker-1"} {
		pod := ciliumchart.DaemonSetPod(agent, node)
		start := time.Now()
		if err := env.Client.Create(ctx, pod); err != nil {
			t.Fatalf("a pod on %s was not admitted while the webhook was down: %v", node, err)
		}
		t.Logf("pod on %s admitted without the webhook in %s", node, time.Since(start).Round(time.Millisecond))
		// Without the webhook every pod gets the template's values: the kubeconfig, never the external name.
		for _, p := range ciliumchart.VerifyEnv(&pod.Spec, &agent.Spec.Template.Spec, template, cms) {
			t.Errorf("pod on %s while the webhook was down: %s", node, p)
		}
	}

	if err := env.Extensions().StartAgain(); err != nil {
		t.Fatal(err)
	}
	restarted = true
	rendered, err := ciliumchart.Render(version, ciliumchart.Values(version))
	if err != nil {
		t.Fatal(err)
	}
	waitUntilMutating(t, rendered.Agent)
	pod := ciliumchart.DaemonSetPod(agent, "cp-2")
	if err := env.Client.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	verifyPod(t, "pod on cp-2 once the webhook is back", pod, &corev1.Pod{Spec: agent.Spec.Template.Spec}, true, cms)
}

// TestMetricsAndHealthBindAsConfigured: the endpoints and the webhook server answer on the configured loopback
// addresses and nowhere else; metrics only over TLS (HTTP/1.1), and only to a caller that kube-apiserver authenticates
// and authorizes for /metrics (the chart's metrics-reader role), never without a token.
func TestMetricsAndHealthBindAsConfigured(t *testing.T) {
	for path, addr := range map[string]string{"/healthz": env.HealthAddress, "/readyz": env.HealthAddress} {
		// Readiness may blip while an informer that a case before made the extension start syncs (h6 of session 25):
		// the endpoint answers 200 once it is ready.
		var last string
		if err := testenv.WaitFor(context.Background(), 30*time.Second, func(context.Context) (bool, error) {
			resp, err := http.Get("http://" + addr + path)
			if err != nil {
				last = err.Error()
				return false, nil
			}
			resp.Body.Close()
			last = resp.Status
			return resp.StatusCode == http.StatusOK, nil
		}); err != nil {
			t.Errorf("%s on %s: %s", path, addr, last)
		}
	}
	token, err := env.MetricsReaderToken(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		token string
		want  int
	}{{"", http.StatusUnauthorized}, {token, http.StatusOK}} {
		status, proto := getMetrics(t, tc.token)
		if status != tc.want || proto != "HTTP/1.1" {
			t.Errorf("GET /metrics with token %v: %d over %s, want %d over HTTP/1.1", tc.token != "", status, proto, tc.want)
		}
	}
	// The same ports on the machine's other addresses refuse connections.
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		ip, _, err := net.ParseCIDR(a.String())
		if err != nil || ip.IsLoopback() || ip.IsLinkLocalUnicast() {
			continue
		}
		for _, bound := range []string{env.MetricsAddress, env.HealthAddress, env.Extensions().WebhookAddress()} {
			_, port, _ := net.SplitHostPort(bound)
			if conn, err := net.DialTimeout("tcp", net.JoinHostPort(ip.String(), port), time.Second); err == nil {
				conn.Close()
				t.Errorf("port %s also answers on %s", port, ip)
			}
		}
	}
}

// TestWebhookServerCutsOffSlowBodies: a caller of the webhook server that sends a request's header and then trickles
// its body, as a slowloris does from the node network, loses the connection: the extension's server stops reading
// after the webhooks' timeout on kube-apiserver's side, not only after controller-runtime's 32 s header timeout.
func TestWebhookServerCutsOffSlowBodies(t *testing.T) {
	conn, err := tls.Dial("tcp", env.Extensions().WebhookAddress(), &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // who serves is not what is tested
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := fmt.Fprintf(conn, "POST /%s HTTP/1.1\r\nHost: webhook\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{", apiserveraccess.AgentWebhookName); err != nil {
		t.Fatal(err)
	}
	// Four times the bound, so that a loaded machine cannot fail this; a server without it waits for the body forever.
	bound := 4 * time.Duration(apiserveraccess.TimeoutSeconds) * time.Second
	if err := conn.SetReadDeadline(time.Now().Add(bound)); err != nil {
		t.Fatal(err)
	}
	reply, err := io.ReadAll(conn)
	var netErr net.Error
	if errors.As(err, &netErr) && netErr.Timeout() {
		t.Fatalf("the webhook server still reads the body after %s", bound)
	}
	// controller-runtime answers a body it could not read with an AdmissionReview that allows nothing.
	if strings.Contains(string(reply), `"allowed":true`) {
		t.Errorf("the webhook server admitted a body it never got: %s", reply)
	}
}

// getMetrics gets /metrics over TLS, offering HTTP/2, with a bearer token unless empty. The serving certificate is
// the server's own; what is tested is who may read.
func getMetrics(t *testing.T, token string) (int, string) {
	t.Helper()
	transport := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, ForceAttemptHTTP2: true} //nolint:gosec // see above
	defer transport.CloseIdleConnections()
	req, err := http.NewRequest(http.MethodGet, "https://"+env.MetricsAddress+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := (&http.Client{Transport: transport, Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	resp.Body.Close()
	return resp.StatusCode, resp.Proto
}

// TestWorkersSpreadOverControlPlane: pods on different nodes off the control plane list the control-plane nodes in
// different orders in their hostAliases, so that (with Go's resolver keeping hosts-file order, see test/operator/connect) they
// spread their connections over all kube-apiservers.
func TestWorkersSpreadOverControlPlane(t *testing.T) {
	rendered := renderWhenMutating(t)
	first := map[string]int{}
	for i := range 30 {
		pod := ciliumchart.DaemonSetPod(rendered.Agent, fmt.Sprintf("worker-spread-%d", i))
		if err := env.Client.Create(context.Background(), pod, client.DryRunAll); err != nil {
			t.Fatal(err)
		}
		if len(pod.Spec.HostAliases) != len(fixtures.ControlPlaneIPs) {
			t.Fatalf("pod on %s: hostAliases %+v", pod.Spec.Affinity.NodeAffinity, pod.Spec.HostAliases)
		}
		first[pod.Spec.HostAliases[0].IP]++
	}
	for _, ip := range fixtures.ControlPlaneIPs {
		if first[ip] < 3 {
			t.Errorf("%d of 30 nodes dial %s first, want a spread over the control plane: %v", first[ip], ip, first)
		}
	}
}
