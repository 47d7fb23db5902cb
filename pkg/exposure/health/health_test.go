// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package health

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"

	secretsutils "github.com/gardener/gardener/pkg/utils/secrets"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/apiserverendpoints"
)

const token = "the-extensions-token"

// expA and expB are exposures that list endpoints.
var (
	expA = types.NamespacedName{Namespace: "garden", Name: "a"}
	expB = types.NamespacedName{Namespace: "garden", Name: "b"}
)

// apiServer stands for the /readyz endpoint of a kube-apiserver (the suites under test/ probe real ones): HTTPS with a
// certificate for serverNames signed by the cluster CA, answering per its switch, and only with the token.
type apiServer struct {
	*httptest.Server
	status atomic.Int32
	// location, when set, is where its answer redirects.
	location atomic.Pointer[string]
	requests atomic.Int32
	// open counts the connections the server holds.
	open atomic.Int32
}

// serverCertificate is a kube-apiserver serving certificate for serverNames and ips, signed by ca.
func serverCertificate(t *testing.T, ca *secretsutils.Certificate, ips []net.IP, serverNames ...string) tls.Certificate {
	t.Helper()
	cert, err := (&secretsutils.CertificateSecretConfig{
		Name: "kube-apiserver", CommonName: "kube-apiserver", DNSNames: serverNames, IPAddresses: ips,
		CertType: secretsutils.ServerCert, SigningCA: ca,
	}).GenerateCertificate()
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(cert.CertificatePEM, cert.PrivateKeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return pair
}

func newAPIServer(t *testing.T, ca *secretsutils.Certificate, serverNames ...string) *apiServer {
	t.Helper()
	pair := serverCertificate(t, ca, nil, serverNames...)
	s := &apiServer{}
	s.status.Store(http.StatusOK)
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.requests.Add(1)
		switch {
		case r.Header.Get("Authorization") != "Bearer "+token:
			w.WriteHeader(http.StatusUnauthorized)
		case r.URL.Path != "/readyz":
			w.WriteHeader(http.StatusNotFound)
		default:
			if l := s.location.Load(); l != nil {
				w.Header().Set("Location", *l)
			}
			w.WriteHeader(int(s.status.Load()))
			_, _ = w.Write([]byte("[-]etcd failed: reason withheld\n"))
		}
	}))
	s.TLS = &tls.Config{Certificates: []tls.Certificate{pair}}
	s.Config.ErrorLog = log.New(io.Discard, "", 0) // the handshakes refused on purpose
	s.Config.ConnState = func(_ net.Conn, state http.ConnState) {
		switch state {
		case http.StateNew:
			s.open.Add(1)
		case http.StateClosed, http.StateHijacked:
			s.open.Add(-1)
		}
	}
	s.StartTLS()
	t.Cleanup(s.Close)
	return s
}

func (s *apiServer) address() string { return s.Listener.Addr().String() }

func newCA(t *testing.T) *secretsutils.Certificate {
	t.Helper()
	ca, err := (&secretsutils.CertificateSecretConfig{Name: "ca", CommonName: "kubernetes", CertType: secretsutils.CACert}).GenerateCertificate()
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// fast are settings that keep the test short; the thresholds are the defaults'. Probes of 100 ms timed out two in a
// row on a busy machine (make test runs the suites beside the unit tests).
var fast = Settings{Interval: 500 * time.Millisecond, Timeout: 500 * time.Millisecond, FailureThreshold: 2, SuccessThreshold: 2}

// changes records the exposures the registry reports, one entry per change.
type changes struct {
	mu      sync.Mutex
	reports [][]types.NamespacedName
}

func (c *changes) record(_ context.Context, exposures []types.NamespacedName) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reports = append(c.reports, exposures)
}

func (c *changes) all() [][]types.NamespacedName {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.reports)
}

func newRegistry(t *testing.T, ca *secretsutils.Certificate, c *changes) *Registry {
	t.Helper()
	r, err := NewRegistry(&rest.Config{BearerToken: token, TLSClientConfig: rest.TLSClientConfig{CAData: ca.CertificatePEM}}, PurposeEndpoints, fast, c.record)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	return r
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting until %s", what)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// TestEndpointOutAndBack: of three endpoints shared by two exposures, the one whose kube-apiserver answers 503 goes
// out after the failure threshold, with the answer as reason, and comes back after the success threshold; the others
// stay ready throughout; every change is reported once.
func TestEndpointOutAndBack(t *testing.T) {
	ca := newCA(t)
	servers := []*apiServer{newAPIServer(t, ca, apiserverendpoints.ServerName), newAPIServer(t, ca, apiserverendpoints.ServerName), newAPIServer(t, ca, apiserverendpoints.ServerName)}
	c := &changes{}
	r := newRegistry(t, ca, c)
	all := []string{servers[0].address(), servers[1].address(), servers[2].address()}
	r.Track(expA, all)
	r.Track(expB, all[1:])
	if got := r.Probers(); got != 3 {
		t.Fatalf("%d probers for 3 addresses", got)
	}
	waitFor(t, "every server was probed", func() bool {
		return servers[0].requests.Load() > 2 && servers[1].requests.Load() > 2 && servers[2].requests.Load() > 2
	})
	for _, addr := range all {
		if s := r.State(addr); !s.Ready {
			t.Fatalf("%s not ready while its kube-apiserver is: %+v", addr, s)
		}
	}

	servers[1].status.Store(http.StatusServiceUnavailable)
	// The prober stores the state first and then sets the metrics and reports the change (observe): what the test
	// reads last is the report.
	waitFor(t, "the endpoint answering 503 is out and reported", func() bool { return !r.State(all[1]).Ready && len(c.all()) == 1 })
	if s := r.State(all[1]); !strings.Contains(s.Reason, "503") || !strings.Contains(s.Reason, "etcd failed") {
		t.Errorf("reason %q, want the answer of /readyz", s.Reason)
	}
	if !r.State(all[0]).Ready || !r.State(all[2]).Ready {
		t.Error("another endpoint went out with it")
	}
	if got := r.Users(all[1]); len(got) != 2 {
		t.Errorf("users of %s: %v, want both exposures", all[1], got)
	}

	if got := testutil.ToFloat64(endpointReady.WithLabelValues(PurposeEndpoints, all[1])); got != 0 {
		t.Errorf("metric endpoint_ready of the endpoint out: %v", got)
	}
	servers[1].status.Store(http.StatusOK)
	waitFor(t, "the endpoint is back and reported", func() bool { return r.State(all[1]).Ready && len(c.all()) == 2 })
	for to, want := range map[string]float64{"not-ready": 1, "ready": 1} {
		if got := testutil.ToFloat64(endpointTransitions.WithLabelValues(PurposeEndpoints, all[1], to)); got != want {
			t.Errorf("metric transitions_total to %s: %v, want %v", to, got, want)
		}
	}
	if got := testutil.ToFloat64(endpointReady.WithLabelValues(PurposeEndpoints, all[1])); got != 1 {
		t.Errorf("metric endpoint_ready of the endpoint back: %v", got)
	}
	if got := testutil.CollectAndCount(probeDuration, "cilium_selfhosted_apiserver_probe_duration_seconds"); got < 3 {
		t.Errorf("probe durations of %d endpoints, want 3", got)
	}
	// Out and back, each reported to both exposures that list the endpoint; nothing for the others.
	want := [][]types.NamespacedName{{expA, expB}, {expA, expB}}
	if got := c.all(); !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("changes reported %v, want %v", got, want)
	}
}

// TestProbesVerifyAndAuthenticate: a kube-apiserver whose certificate does not hold the server name, or that does not
// get the extension's token, is not ready.
func TestProbesVerifyAndAuthenticate(t *testing.T) {
	ca := newCA(t)
	otherName := newAPIServer(t, ca, "api.example.com")
	otherCA := newAPIServer(t, newCA(t), apiserverendpoints.ServerName)
	r := newRegistry(t, ca, &changes{})
	r.Track(expA, []string{otherName.address(), otherCA.address()})
	for _, s := range []*apiServer{otherName, otherCA} {
		waitFor(t, s.address()+" is out", func() bool { return !r.State(s.address()).Ready })
		if reason := r.State(s.address()).Reason; !strings.Contains(reason, "certificate") {
			t.Errorf("reason %q, want the certificate's", reason)
		}
	}

	unauthenticated, err := NewRegistry(&rest.Config{TLSClientConfig: rest.TLSClientConfig{CAData: ca.CertificatePEM}}, PurposeEndpoints, fast, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(unauthenticated.Stop)
	good := newAPIServer(t, ca, apiserverendpoints.ServerName)
	unauthenticated.Track(expA, []string{good.address()})
	waitFor(t, "a probe without the token fails", func() bool { return !unauthenticated.State(good.address()).Ready })
	if reason := unauthenticated.State(good.address()).Reason; !strings.Contains(reason, "401") {
		t.Errorf("reason %q, want 401", reason)
	}
}

// TestProbesFollowNoRedirect: a kube-apiserver (or whatever answers at its address) that redirects the probe is not
// ready, and the redirect's target never gets the request, which would carry the extension's token.
func TestProbesFollowNoRedirect(t *testing.T) {
	ca := newCA(t)
	target := newAPIServer(t, ca, apiserverendpoints.ServerName)
	redirecting := newAPIServer(t, ca, apiserverendpoints.ServerName)
	redirecting.status.Store(http.StatusFound)
	redirecting.location.Store(new("https://" + target.address() + "/readyz"))
	r := newRegistry(t, ca, &changes{})
	r.Track(expA, []string{redirecting.address()})
	waitFor(t, "the redirecting endpoint is out", func() bool { return !r.State(redirecting.address()).Ready })
	if reason := r.State(redirecting.address()).Reason; !strings.Contains(reason, "302") {
		t.Errorf("reason %q, want the redirect's 302", reason)
	}
	if n := target.requests.Load(); n > 0 {
		t.Errorf("the redirect's target got %d requests", n)
	}
}

// TestHungEndpointTimesOut: a kube-apiserver that accepts connections and never answers goes out by the timeout.
func TestHungEndpointTimesOut(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { conn.Close() })
		}
	}()
	r := newRegistry(t, newCA(t), &changes{})
	r.Track(expA, []string{l.Addr().String()})
	waitFor(t, "the hung endpoint is out", func() bool { return !r.State(l.Addr().String()).Ready })
}

// TestProbersStopWithTheirExposures: a prober runs while any exposure lists its address; when the last one drops it,
// its goroutine ends and no connection to the endpoint stays open.
func TestProbersStopWithTheirExposures(t *testing.T) {
	ca := newCA(t)
	s := newAPIServer(t, ca, apiserverendpoints.ServerName)
	r := newRegistry(t, ca, &changes{})
	r.Track(expA, []string{s.address()})
	r.Track(expB, []string{s.address()})
	r.Untrack(expA)
	before := s.requests.Load()
	waitFor(t, "the shared prober keeps probing", func() bool { return s.requests.Load() > before+2 })
	r.Track(expB, nil)
	if got := r.Probers(); got != 0 {
		t.Fatalf("%d probers after the last exposure dropped the address", got)
	}
	waitFor(t, "the prober's goroutine ended", func() bool { return r.running.Load() == 0 })
	waitFor(t, "no connection is left", func() bool { return s.open.Load() == 0 })
	if strings.Contains(seriesOf(t, endpointReady), s.address()) {
		t.Errorf("metrics of %s left after its prober stopped", s.address())
	}
}

func TestPublish(t *testing.T) {
	for name, tc := range map[string]struct {
		states     map[string]State
		notReady   []string
		allFailing bool
	}{
		"all ready":        {map[string]State{"a": {Ready: true}, "b": {Ready: true}}, nil, false},
		"one out":          {map[string]State{"a": {Ready: true}, "b": {Reason: "503"}}, []string{"b"}, false},
		"all out":          {map[string]State{"a": {Reason: "503"}, "b": {Reason: "refused"}}, nil, true},
		"the only one out": {map[string]State{"a": {Reason: "503"}}, nil, true},
		"no endpoint":      {map[string]State{}, nil, false},
		"two of three out": {map[string]State{"a": {Reason: "x"}, "b": {Reason: "y"}, "c": {Ready: true}}, []string{"a", "b"}, false},
	} {
		t.Run(name, func(t *testing.T) {
			notReady, allFailing := Publish(tc.states)
			if allFailing != tc.allFailing || len(notReady) != len(tc.notReady) {
				t.Fatalf("not ready %v, all failing %v; want %v, %v", notReady, allFailing, tc.notReady, tc.allFailing)
			}
			for _, addr := range tc.notReady {
				if notReady[addr] != tc.states[addr].Reason {
					t.Errorf("%s: reason %q, want %q", addr, notReady[addr], tc.states[addr].Reason)
				}
			}
		})
	}
}

func TestSettingsValidate(t *testing.T) {
	if err := DefaultSettings.Validate(); err != nil {
		t.Errorf("defaults: %v", err)
	}
	if err := (Settings{}).Validate(); err != nil {
		t.Errorf("probing off: %v", err)
	}
	for _, s := range []Settings{
		{Interval: -time.Second, Timeout: time.Millisecond, FailureThreshold: 1, SuccessThreshold: 1},
		{Interval: time.Second, Timeout: 2 * time.Second, FailureThreshold: 1, SuccessThreshold: 1},
		{Interval: time.Second, Timeout: time.Millisecond, FailureThreshold: 0, SuccessThreshold: 1},
	} {
		if err := s.Validate(); err == nil {
			t.Errorf("%+v accepted", s)
		}
	}
}

// TestProbingOff: with interval 0 nothing is probed and every endpoint counts as ready.
func TestProbingOff(t *testing.T) {
	ca := newCA(t)
	s := newAPIServer(t, ca, apiserverendpoints.ServerName)
	s.status.Store(http.StatusServiceUnavailable)
	r, err := NewRegistry(&rest.Config{BearerToken: token, TLSClientConfig: rest.TLSClientConfig{CAData: ca.CertificatePEM}}, PurposeEndpoints, Settings{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	r.Track(expA, []string{s.address()})
	if r.Probers() != 0 || !r.State(s.address()).Ready || s.requests.Load() != 0 {
		t.Errorf("probing although switched off: %d probers, state %+v, %d requests", r.Probers(), r.State(s.address()), s.requests.Load())
	}
}

// seriesOf is the exposition text of c.
func seriesOf(t *testing.T, c prometheus.Collector) string {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, f := range families {
		b.WriteString(f.String())
	}
	return b.String()
}

// proberRegistry starts server, a kube-apiserver that serves TokenRequests and /readyz with pair, and returns a
// registry with settings whose probes authenticate as the ServiceAccount extension/prober, requesting its tokens from
// server as the extension.
func proberRegistry(t *testing.T, ca *secretsutils.Certificate, pair tls.Certificate, server *httptest.Server, settings Settings) *Registry {
	t.Helper()
	server.TLS = &tls.Config{Certificates: []tls.Certificate{pair}}
	server.StartTLS()
	t.Cleanup(server.Close)
	settings.ServiceAccount = "extension/prober"
	r, err := NewRegistry(&rest.Config{Host: server.URL, BearerToken: token, TLSClientConfig: rest.TLSClientConfig{CAData: ca.CertificatePEM}}, PurposeEndpoints, settings, (&changes{}).record)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	return r
}

// TestProbesCarryTheProberToken: with a ServiceAccount for the probes, every probe carries a token that the extension
// requested for that account, with its own identity, from kube-apiserver, and never the extension's own token; a
// token kube-apiserver rejects is requested anew.
func TestProbesCarryTheProberToken(t *testing.T) {
	ca := newCA(t)
	pair := serverCertificate(t, ca, []net.IP{net.ParseIP("127.0.0.1")}, apiserverendpoints.ServerName)
	var issued, extensionTokenProbes, proberTokenProbes atomic.Int32
	server := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth := r.Header.Get("Authorization")
		switch {
		case r.Method == http.MethodPost && r.URL.Path == "/api/v1/namespaces/extension/serviceaccounts/prober/token":
			if auth != "Bearer "+token {
				w.WriteHeader(http.StatusUnauthorized)
				return
			}
			n := issued.Add(1)
			w.Header().Set("Content-Type", "application/json")
			_, _ = fmt.Fprintf(w, `{"apiVersion":"authentication.k8s.io/v1","kind":"TokenRequest","status":{"token":"prober-%d","expirationTimestamp":%q}}`,
				n, time.Now().Add(10*time.Minute).UTC().Format(time.RFC3339))
		case r.URL.Path == "/readyz" && auth == "Bearer "+token:
			extensionTokenProbes.Add(1)
			w.WriteHeader(http.StatusOK)
		case r.URL.Path == "/readyz" && auth == "Bearer prober-1":
			// The first token is rejected from the start, as one of a ServiceAccount recreated since.
			w.WriteHeader(http.StatusUnauthorized)
		case r.URL.Path == "/readyz" && strings.HasPrefix(auth, "Bearer prober-"):
			proberTokenProbes.Add(1)
			w.WriteHeader(http.StatusOK)
		default:
			w.WriteHeader(http.StatusUnauthorized)
		}
	}))
	r := proberRegistry(t, ca, pair, server, fast)
	addr := server.Listener.Addr().String()
	r.Track(expA, []string{addr})
	waitFor(t, "probes with a renewed prober token succeed", func() bool { return proberTokenProbes.Load() > 2 && r.State(addr).Ready })
	if n := extensionTokenProbes.Load(); n != 0 {
		t.Errorf("%d probes carried the extension's own token", n)
	}
	if n := issued.Load(); n < 2 {
		t.Errorf("%d tokens requested, want a new one after the first was rejected", n)
	}
}

// TestProbeServiceAccountMustBeNamespaced: the probes' ServiceAccount is namespace/name.
func TestProbeServiceAccountMustBeNamespaced(t *testing.T) {
	for _, account := range []string{"prober", "/prober", "ns/", "a/b/c"} {
		s := fast
		s.ServiceAccount = account
		if err := s.Validate(); err == nil {
			t.Errorf("ServiceAccount %q accepted", account)
		}
	}
}

// TestProberTokenRenewedInBackground: a prober token is renewed before it expires, by the registry rather than by a
// probe: with tokens that live ten seconds and a kube-apiserver that takes two probe timeouts to issue a renewal,
// new tokens keep being issued, each renewal is asked for before the probes' token source would (at nine tenths of
// the token's life, token.go), no probe carries an expired one, and the endpoint never goes out.
func TestProberTokenRenewedInBackground(t *testing.T) {
	const life = 10 * time.Second
	ca := newCA(t)
	pair := serverCertificate(t, ca, []net.IP{net.ParseIP("127.0.0.1")}, apiserverendpoints.ServerName)
	var (
		mu      sync.Mutex
		expiry  = map[string]time.Time{}
		late    []string
		lastAt  time.Time
		expired atomic.Int32
		issued  atomic.Int32
	)
	server := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/serviceaccounts/prober/token") {
			n := issued.Add(1)
			mu.Lock()
			// The registry asks at three fifths of the life, the probes' token source at nine tenths: between them.
			if asked := time.Since(lastAt); n > 1 && asked >= life*3/4 {
				late = append(late, fmt.Sprintf("renewal %d asked for %s after the token before", n-1, asked.Round(time.Millisecond)))
			}
			mu.Unlock()
			if n > 1 {
				time.Sleep(2 * fast.Timeout) // a slow kube-apiserver: probes waiting for this renewal would time out
			}
			name, until := fmt.Sprintf("prober-%d", n), time.Now().Add(life)
			mu.Lock()
			expiry[name], lastAt = until, time.Now()
			mu.Unlock()
			w.Header().Set("Content-Type", "application/json")
			_, _ = fmt.Fprintf(w, `{"apiVersion":"authentication.k8s.io/v1","kind":"TokenRequest","status":{"token":%q,"expirationTimestamp":%q}}`,
				name, until.UTC().Format(time.RFC3339Nano))
			return
		}
		mu.Lock()
		until, ok := expiry[auth]
		mu.Unlock()
		if !ok || time.Now().After(until) {
			expired.Add(1)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	// Two failed probes in a row take the endpoint out, so that one slow probe on a busy machine does not; a probe
	// that waited for a renewal shows as a late renewal.
	r := proberRegistry(t, ca, pair, server, fast)
	r.Track(expA, []string{server.Listener.Addr().String()})
	// The third token is asked for about 13 s in, beyond waitFor's 10 s.
	if err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return issued.Load() >= 3, nil
	}); err != nil {
		t.Fatalf("%d tokens issued: %v", issued.Load(), err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(late) > 0 {
		t.Errorf("renewed by the probes, not in the background: %v", late)
	}
	if n := expired.Load(); n != 0 {
		t.Errorf("%d probes carried an expired token", n)
	}
	if n := testutil.ToFloat64(endpointTransitions.WithLabelValues(PurposeEndpoints, server.Listener.Addr().String(), "not-ready")); n != 0 {
		t.Errorf("the endpoint went out %v times while its token was renewed", n)
	}
}

// TestProbesNeverDialAnotherKubeAPIServer: the extension's own clients fall back to another control-plane node's
// kube-apiserver when theirs is down (pkg/apiserverfailover); a probe of a stopped kube-apiserver must not, or it
// would report that one ready.
func TestProbesNeverDialAnotherKubeAPIServer(t *testing.T) {
	ca := newCA(t)
	live := newAPIServer(t, ca, apiserverendpoints.ServerName)
	stopped := newAPIServer(t, ca, apiserverendpoints.ServerName)
	stoppedAddress := stopped.address()
	stopped.Close()
	config := &rest.Config{BearerToken: token, TLSClientConfig: rest.TLSClientConfig{CAData: ca.CertificatePEM},
		Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, live.address())
		}}
	r, err := NewRegistry(config, PurposeEndpoints, fast, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	r.Track(expA, []string{stoppedAddress})
	waitFor(t, "the stopped kube-apiserver is out", func() bool { return !r.State(stoppedAddress).Ready })
	if n := live.requests.Load(); n > 0 {
		t.Errorf("the probes of %s reached another kube-apiserver %d times", stoppedAddress, n)
	}
}
