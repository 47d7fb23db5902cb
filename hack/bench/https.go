// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	extensionswebhook "github.com/gardener/gardener/extensions/pkg/webhook"
	"github.com/gardener/gardener/extensions/pkg/webhook/certificates"

	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/ciliumchart"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/testenv"
	"github.com/gardener/gardener-extension-cilium-selfhosted/webhook/apiserveraccess"
)

// webhookServer is controller-runtime's webhook server, as the extension runs it, serving the agent webhook and a
// handler that only answers allowed, with a certificate from Gardener's unmanaged certificate generation.
type webhookServer struct {
	url      string
	caBundle []byte
	cancel   context.CancelFunc
}

// startWebhookServerInTempDir starts the server with its certificate in a temporary directory; stop removes both.
func startWebhookServerInTempDir(f *fixture) (ws *webhookServer, stop func(), err error) {
	dir, err := os.MkdirTemp("", "bench-webhook-")
	if err != nil {
		return nil, nil, err
	}
	if ws, err = startWebhookServer(f, dir); err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	return ws, func() { ws.cancel(); os.RemoveAll(dir) }, nil
}

func startWebhookServer(f *fixture, dir string) (*webhookServer, error) {
	port, err := testenv.FreePort()
	if err != nil {
		return nil, err
	}
	host := "127.0.0.1:" + strconv.Itoa(port)
	caBundle, err := certificates.GenerateUnmanagedCertificates("bench", false, dir, extensionswebhook.ModeURL, host)
	if err != nil {
		return nil, err
	}
	server := webhook.NewServer(webhook.Options{Host: "127.0.0.1", Port: port, CertDir: dir})
	server.Register("/"+apiserveraccess.AgentWebhookName, f.webhooks[apiserveraccess.AgentWebhookName].Webhook)
	server.Register("/allow", &admission.Webhook{Handler: f.allowOnly})
	server.Register("/annotate", &admission.Webhook{Handler: f.annotate})
	server.Register("/generic", &admission.Webhook{Handler: f.generic})
	if f.replay != nil {
		server.Register("/replay", &admission.Webhook{Handler: f.replay})
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { _ = server.Start(ctx) }()
	ws := &webhookServer{url: "https://" + host, caBundle: caBundle, cancel: cancel}
	if err := testenv.WaitFor(ctx, 10*time.Second, func(context.Context) (bool, error) {
		return server.StartedChecker()(nil) == nil, nil
	}); err != nil {
		cancel()
		return nil, err
	}
	return ws, nil
}

type loadResult struct {
	latencies []time.Duration
	errors    int
	elapsed   time.Duration
}

// add adds another load's requests.
func (l *loadResult) add(o loadResult) {
	l.latencies = append(l.latencies, o.latencies...)
	l.errors += o.errors
	l.elapsed += o.elapsed
}

func (l loadResult) percentile(p float64) time.Duration {
	if len(l.latencies) == 0 {
		return 0
	}
	return l.latencies[min(len(l.latencies)-1, int(float64(len(l.latencies))*p))]
}

// loader sends AdmissionReviews for agent pods on control-plane and worker nodes, alternating, to one webhook server
// over HTTPS, as kube-apiserver would. Its connections are kept from one load to the next.
type loader struct {
	url        string
	httpClient *http.Client
	bodies     [][]byte
}

func newLoader(ws *webhookServer, f *fixture, clients int) *loader {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ws.caBundle)
	l := &loader{url: ws.url, httpClient: &http.Client{Transport: &http.Transport{
		TLSClientConfig:     &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		MaxIdleConnsPerHost: clients,
	}}}
	for _, node := range []string{"cp-1", "worker-0"} {
		req := f.request(ciliumchart.DaemonSetPod(f.rendered.Agent, node))
		review := admissionv1.AdmissionReview{Request: &req.AdmissionRequest}
		review.APIVersion, review.Kind = "admission.k8s.io/v1", "AdmissionReview"
		b, _ := json.Marshal(review)
		l.bodies = append(l.bodies, b)
	}
	return l
}

// load sends count AdmissionReviews to path with clients concurrent clients.
func (l *loader) load(path string, clients, count int) loadResult {
	httpClient, bodies := l.httpClient, l.bodies
	var (
		mu  sync.Mutex
		res loadResult
		wg  sync.WaitGroup
	)
	start := time.Now()
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var local []time.Duration
			errs := 0
			for i := c; i < count; i += clients {
				t0 := time.Now()
				resp, err := httpClient.Post(l.url+path, "application/json", bytes.NewReader(bodies[i%len(bodies)]))
				if err != nil {
					errs++
					continue
				}
				var out admissionv1.AdmissionReview
				err = json.NewDecoder(resp.Body).Decode(&out)
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if err != nil || resp.StatusCode != http.StatusOK || out.Response == nil || !out.Response.Allowed {
					errs++
					continue
				}
				local = append(local, time.Since(t0))
			}
			mu.Lock()
			res.latencies = append(res.latencies, local...)
			res.errors += errs
			mu.Unlock()
		}()
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	slices.Sort(res.latencies)
	return res
}

func httpsLoad(r *report, f *fixture) error {
	const section = "2. Admission over HTTPS (controller-runtime webhook server, agent pods on control-plane and worker nodes)"
	ws, stop, err := startWebhookServerInTempDir(f)
	if err != nil {
		return err
	}
	defer stop()

	const clients, count = 16, 8000
	l := newLoader(ws, f, clients)
	l.load("/allow", clients, 1000) // warm up connections and both handlers
	l.load("/"+apiserveraccess.AgentWebhookName, clients, 1000)
	// In alternating rounds, so that what else the two shared cores do at one moment falls on both alike.
	const rounds = 8
	var floor, ours loadResult
	for range rounds {
		floor.add(l.load("/allow", clients, count/rounds))
		ours.add(l.load("/"+apiserveraccess.AgentWebhookName, clients, count/rounds))
	}
	slices.Sort(floor.latencies)
	slices.Sort(ours.latencies)

	name := fmt.Sprintf("%d clients, %d requests", clients, count)
	baseline := "same server, handler answering allowed"
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	r.add(Result{Section: section, Name: "p50 latency, " + name, Value: ms(ours.percentile(0.50)), Unit: "ms", Baseline: ms(floor.percentile(0.50)), BaselineName: baseline})
	p99ok := ours.percentile(0.99) <= 2*floor.percentile(0.99)
	r.add(Result{Section: section, Name: "p99 latency, " + name, Value: ms(ours.percentile(0.99)), Unit: "ms", Baseline: ms(floor.percentile(0.99)), BaselineName: baseline,
		Goal: "<= 2x the floor", Met: met(p99ok)})
	r.add(Result{Section: section, Name: "max latency, " + name, Value: ms(ours.percentile(1)), Unit: "ms", Baseline: ms(floor.percentile(1)), BaselineName: baseline})
	r.add(Result{Section: section, Name: "throughput, " + name, Value: float64(len(ours.latencies)) / ours.elapsed.Seconds(), Unit: "req/s",
		Baseline: float64(len(floor.latencies)) / floor.elapsed.Seconds(), BaselineName: baseline})
	r.add(Result{Section: section, Name: "errors, " + name, Value: float64(ours.errors), Unit: "", Baseline: float64(floor.errors), BaselineName: baseline,
		Goal: "zero", Met: met(ours.errors == 0)})
	return nil
}

// loadExtension sends section 2's load to the agent webhook of the running extension process, at the URL and with the
// CA bundle of its MutatingWebhookConfiguration, and reports its latency and the process's resident set after it. The
// floor cannot be served by that process; section 2 compares within one server.
func loadExtension(ctx context.Context, r *report, env *testenv.Env, f *fixture, pid int) error {
	const section = "2. Admission over HTTPS (controller-runtime webhook server, agent pods on control-plane and worker nodes)"
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: testenv.WebhookConfigName}, mwc); err != nil {
		return err
	}
	i := slices.IndexFunc(mwc.Webhooks, func(wh admissionregistrationv1.MutatingWebhook) bool {
		return strings.HasPrefix(wh.Name, apiserveraccess.AgentWebhookName+".")
	})
	if i < 0 || mwc.Webhooks[i].ClientConfig.URL == nil {
		return fmt.Errorf("the extension registered no agent webhook with a URL")
	}
	u, err := url.Parse(*mwc.Webhooks[i].ClientConfig.URL)
	if err != nil {
		return err
	}
	ws := &webhookServer{url: u.Scheme + "://" + u.Host, caBundle: mwc.Webhooks[i].ClientConfig.CABundle}
	const clients, count = 16, 8000
	l := newLoader(ws, f, clients)
	l.load(u.Path, clients, 1000)
	res := l.load(u.Path, clients, count)
	if res.errors > 0 {
		return fmt.Errorf("%d of %d requests to the extension's webhook failed", res.errors, count)
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	name := fmt.Sprintf("extension process, %d clients, %d requests", clients, count)
	r.add(Result{Section: section, Name: "p50 latency, " + name, Value: ms(res.percentile(0.50)), Unit: "ms"})
	r.add(Result{Section: section, Name: "p99 latency, " + name, Value: ms(res.percentile(0.99)), Unit: "ms"})
	r.add(Result{Section: section, Name: "throughput, " + name, Value: float64(len(res.latencies)) / res.elapsed.Seconds(), Unit: "req/s"})
	memory(r, pid, "after section 2's load on its webhook")
	flood(r, l, f, u.Path, pid)
	return nil
}

// flood sends, from many callers at once, AdmissionReviews of nearly the largest body controller-runtime reads (7 MiB)
// to the extension's webhook, as a flood from the node network would, and reports how the callers were answered and
// the process's resident set afterwards: what the chart's memory limit must hold (webhookserver.Limits).
func flood(r *report, l *loader, f *fixture, path string, pid int) {
	const section = "2. Admission over HTTPS (controller-runtime webhook server, agent pods on control-plane and worker nodes)"
	const callers, each = 64, 4
	pod := ciliumchart.DaemonSetPod(f.rendered.Agent, "worker-0")
	pod.Annotations = map[string]string{"bench.cilium-selfhosted/flood": strings.Repeat("x", 6<<20+512<<10)}
	req := f.request(pod)
	review := admissionv1.AdmissionReview{Request: &req.AdmissionRequest}
	review.APIVersion, review.Kind = "admission.k8s.io/v1", "AdmissionReview"
	body, err := json.Marshal(review)
	if err != nil {
		panic(err)
	}
	var (
		mu       sync.Mutex
		statuses = map[int]int{}
		wg       sync.WaitGroup
	)
	for range callers {
		wg.Go(func() {
			for range each {
				status := 0
				resp, err := l.httpClient.Post(l.url+path, "application/json", bytes.NewReader(body))
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					status = resp.StatusCode
				}
				mu.Lock()
				statuses[status]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	name := fmt.Sprintf("flood of %d callers x %d requests of %.1f MiB", callers, each, float64(len(body))/(1<<20))
	r.add(Result{Section: section, Name: "answered, " + name, Value: float64(statuses[http.StatusOK]), Unit: ""})
	r.add(Result{Section: section, Name: "refused 503 (no slot within the webhooks' timeout), " + name, Value: float64(statuses[http.StatusServiceUnavailable]), Unit: ""})
	r.add(Result{Section: section, Name: "failed otherwise, " + name, Value: float64(callers*each - statuses[http.StatusOK] - statuses[http.StatusServiceUnavailable]), Unit: ""})
	memory(r, pid, "after the "+name)
}
