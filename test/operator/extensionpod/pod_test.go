// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package extensionpod_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/apiserverendpoints"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/cilium"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/ciliumchart"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/fixtures"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/podrun"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/testenv"
	"github.com/gardener/gardener-extension-cilium-selfhosted/webhook/apiserveraccess"
)

// TestPodRunsTheImageAsTheChartSays: the extension's pod is a container of the image make image built, with what the
// chart's DaemonSet asks of the runtime, and does in it what the extension does on a self-hosted shoot: it fills the
// MutatingWebhookConfiguration that the chart created empty, admits Cilium's pods through kube-apiserver, serves
// /healthz and, to a reader kube-apiserver authorizes, /metrics, and exposes kube-apiserver on a VIP that Cilium's
// operator assigns; the checks of docs/usage/install.md, run with kubectl, show all of it.
func TestPodRunsTheImageAsTheChartSays(t *testing.T) {
	ctx := context.Background()
	// The configuration as the resource manager creates it from the chart: no webhooks yet. env's extension, which
	// filled it, is stopped first (TakeOver would stop it), so that only the pod can fill it again.
	env.Extensions().Stop(ctx, false)
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: testenv.WebhookConfigName}, mwc); err != nil {
		t.Fatal(errors.Join(err, env.Extensions().StartAgain()))
	}
	mwc.Webhooks = nil
	if err := env.Client.Update(ctx, mwc); err != nil {
		t.Fatal(errors.Join(err, env.Extensions().StartAgain()))
	}
	pod := runExtensionPod(t)
	rendered, err := ciliumchart.RenderGardener(ciliumchart.GardenerVersion, ciliumchart.GardenerValues(ciliumchart.GardenerVersion))
	if err != nil {
		t.Fatal(err)
	}

	t.Run("as the chart's DaemonSet asks", func(t *testing.T) { inspectContainer(t, pod) })
	t.Run("registers its webhooks", func(t *testing.T) { waitForWebhooks(t) })
	t.Run("admits Cilium's pods through kube-apiserver", func(t *testing.T) { admitsCiliumPods(t, rendered) })
	t.Run("serves /healthz and authorized /metrics", servesHealthAndMetrics)
	t.Run("listens on the node's loopback alone", func(t *testing.T) { listensOnLoopbackAlone(t, rendered) })
	t.Run("exposes kube-apiserver with Cilium's operator", func(t *testing.T) {
		exp := fixtureExposure(t, "image")
		if err := env.Client.Create(ctx, exp); err != nil {
			t.Fatal(err)
		}
		waitUntilPublished(t, exp, all(true), "EndpointsReady")
		if err := testenv.WaitUntilReady(ctx, env.Client, exp, time.Minute); err != nil {
			t.Errorf("the exposure never succeeded: %v (lastError %v)", err, exp.Status.LastError)
		} else if len(exp.Status.Ingress) != 1 || exp.Status.Ingress[0].IP != fixtures.ExposureVIP {
			t.Errorf("status.ingress %+v, want the VIP %s that the operator's LB-IPAM assigned", exp.Status.Ingress, fixtures.ExposureVIP)
		}
		t.Run("as docs/usage/install.md checks it, with kubectl", func(t *testing.T) { checkAsInstallSays(t, rendered, exp) })
		// Gone before the pod is: its probes would hold connections that other cases count.
		deleteExposure(t, exp)
	})
}

// inspectContainer checks the pod's container as podman ran it: the image make image built, the node's network, the
// chart's user and group, a read-only root filesystem, every capability dropped, no privilege escalation.
func inspectContainer(t *testing.T, pod *podrun.Started) {
	out, err := node.Output(context.Background(), "container", "inspect", pod.Container)
	if err != nil {
		t.Fatal(err)
	}
	var containers []struct {
		ImageName  string
		Config     struct{ User string }
		HostConfig struct {
			ReadonlyRootfs bool
			CapAdd         []string
			SecurityOpt    []string
			NetworkMode    string
		}
	}
	if err := json.Unmarshal([]byte(out), &containers); err != nil || len(containers) != 1 {
		t.Fatalf("podman container inspect %s: %v\n%s", pod.Container, err, out)
	}
	inspected := containers[0]
	h := inspected.HostConfig
	if inspected.ImageName != testenv.ImageRepository+":"+built.Tag || inspected.Config.User != "65532:65532" || !h.ReadonlyRootfs ||
		len(h.CapAdd) != 0 || !slices.Contains(h.SecurityOpt, "no-new-privileges") || !strings.HasPrefix(h.NetworkMode, "ns:/run/netns/") {
		t.Errorf("the extension's container: image %s, user %q, read-only root %t, capabilities added %v, security options %v, network %s; want %s:%s, 65532:65532, read-only, none, no-new-privileges, the node's",
			inspected.ImageName, inspected.Config.User, h.ReadonlyRootfs, h.CapAdd, h.SecurityOpt, h.NetworkMode, testenv.ImageRepository, built.Tag)
	}
}

// waitForWebhooks waits until the MutatingWebhookConfiguration holds the extension's webhooks, each calling the URL
// the chart names with a CA bundle.
func waitForWebhooks(t *testing.T) {
	var last []string
	if err := testenv.WaitFor(context.Background(), time.Minute, func(ctx context.Context) (bool, error) {
		mwc := &admissionregistrationv1.MutatingWebhookConfiguration{}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: testenv.WebhookConfigName}, mwc); err != nil {
			return false, err
		}
		last = nil
		for _, wh := range mwc.Webhooks {
			if url := wh.ClientConfig.URL; url != nil && strings.HasPrefix(*url, "https://"+env.Extensions().WebhookAddress()+"/") && len(wh.ClientConfig.CABundle) > 0 {
				name, _, _ := strings.Cut(wh.Name, ".")
				last = append(last, name)
			}
		}
		slices.Sort(last)
		return slices.Equal(last, slices.Sorted(slices.Values(apiserveraccess.WebhookNames))), nil
	}); err != nil {
		t.Fatalf("webhooks registered with the chart's URL and a CA bundle: %v, want %v: %v", last, apiserveraccess.WebhookNames, err)
	}
}

// admitsCiliumPods creates the pods of networking-cilium's agent DaemonSet (rendered) for cp-0 and worker-0 (dry run) through
// kube-apiserver, which calls the pod's webhook server, the only one running: they come back pinned, cp-0's to its
// own kube-apiserver, worker-0's to the control-plane nodes.
func admitsCiliumPods(t *testing.T, rendered *ciliumchart.Objects) {
	for _, tc := range []struct {
		node    string
		want    ciliumchart.Want
		aliases []string
	}{
		{"cp-0", ciliumchart.WantLocal(ciliumchart.GardenerVersion), nil},
		{"worker-0", ciliumchart.WantByName(ciliumchart.GardenerVersion), fixtures.ControlPlaneIPs},
	} {
		template := ciliumchart.DaemonSetPod(rendered.Agent, tc.node)
		var problems []string
		// The webhooks fail open (failurePolicy Ignore): a pod admitted unchanged is retried until the pod's webhook
		// server, which kube-apiserver may not reach yet, answers.
		if err := testenv.WaitFor(context.Background(), 30*time.Second, func(ctx context.Context) (bool, error) {
			pod := template.DeepCopy()
			if err := env.Client.Create(ctx, pod, client.DryRunAll); err != nil {
				return false, err
			}
			cm := &corev1.ConfigMap{}
			if err := env.Client.Get(ctx, client.ObjectKey{Namespace: cilium.Namespace, Name: apiserverendpoints.ConfigMapName}, cm); err != nil {
				return false, err
			}
			problems = ciliumchart.VerifyAdmitted(&pod.Spec, &template.Spec, tc.want, tc.aliases, map[string]map[string]string{cm.Name: cm.Data})
			return len(problems) == 0, nil
		}); err != nil {
			t.Errorf("the agent's pod on %s as kube-apiserver admitted it: %v (%v)", tc.node, problems, err)
		}
	}
}

// servesHealthAndMetrics gets /healthz and /metrics from the pod's address, as kubelet's probe and Prometheus do:
// /healthz answers, /metrics only over TLS to a caller kube-apiserver authorizes for it.
func servesHealthAndMetrics(t *testing.T) {
	ctx := context.Background()
	daemonSet := &appsv1.DaemonSet{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: testenv.ExtensionNamespace, Name: testenv.ServiceAccountName}, daemonSet); err != nil {
		t.Fatal(err)
	}
	container := daemonSet.Spec.Template.Spec.Containers[0]
	var metricsPort int32
	for _, p := range container.Ports {
		if p.Name == "metrics" {
			metricsPort = p.ContainerPort
		}
	}
	transport := &http.Transport{
		DialContext:     sandbox.DialContext,
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // who may read is tested, not who serves
	}
	defer transport.CloseIdleConnections()
	get := func(url, token string) (int, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return 0, err
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := (&http.Client{Transport: transport, Timeout: 10 * time.Second}).Do(req)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	healthz := "http://" + net.JoinHostPort(controlPlaneIPs[0], strconv.Itoa(container.ReadinessProbe.HTTPGet.Port.IntValue())) + "/healthz"
	if status, err := get(healthz, ""); status != http.StatusOK {
		t.Errorf("GET %s: %d %v, want 200", healthz, status, err)
	}
	token, err := env.MetricsReaderToken(ctx)
	if err != nil {
		t.Fatal(err)
	}
	metrics := "https://" + net.JoinHostPort(controlPlaneIPs[0], strconv.Itoa(int(metricsPort))) + "/metrics"
	// controller-runtime starts the metrics server beside the health server, which may answer first (t2 of session 31).
	if err := testenv.WaitFor(ctx, 30*time.Second, func(context.Context) (bool, error) {
		_, err := get(metrics, "")
		return err == nil, err
	}); err != nil {
		t.Fatalf("GET %s: %v", metrics, err)
	}
	for _, tc := range []struct {
		token string
		want  int
	}{{"", http.StatusUnauthorized}, {token, http.StatusOK}} {
		if status, err := get(metrics, tc.token); status != tc.want {
			t.Errorf("GET %s with token %t: %d %v, want %d", metrics, tc.token != "", status, err, tc.want)
		}
	}
}
