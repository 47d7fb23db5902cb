// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

// Package health probes the kube-apiserver behind each endpoint of the exposures, so that the VIP sends new
// connections only to kube-apiservers that are ready: a prober per endpoint address asks `GET /readyz`, verified under
// apiserverendpoints.ServerName and authenticated with tokens of a ServiceAccount that may do nothing else, and counts
// an endpoint not ready after FailureThreshold failures in a row; Cilium then sends that backend no new connection
// (docs/usage/exposure.md, "Only ready kube-apiservers get new connections").
package health

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/types"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/rest"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/apiserverendpoints"
)

// Settings say how endpoints are probed.
type Settings struct {
	// Interval is the time between the starts of two probes of an endpoint; 0 switches probing off, and every
	// endpoint counts as ready.
	Interval time.Duration
	// Timeout bounds one probe.
	Timeout time.Duration
	// FailureThreshold is how many failed probes in a row make a ready endpoint not ready; SuccessThreshold how many
	// successful ones make it ready again.
	FailureThreshold, SuccessThreshold int
	// ServiceAccount, namespace/name, is whose short-lived tokens the probes carry (TokenRequest); empty: the
	// extension's own credentials.
	ServiceAccount string
}

// DefaultSettings take an endpoint out about 2 s after its kube-apiserver stops being ready, and back after 2 s; two
// probes in a row keep a single lost one from moving traffic.
var DefaultSettings = Settings{Interval: time.Second, Timeout: 500 * time.Millisecond, FailureThreshold: 2, SuccessThreshold: 2}

// Validate says which setting is out of range.
func (s Settings) Validate() error {
	switch {
	case s.Interval == 0:
		return nil
	case s.Interval < 0:
		return fmt.Errorf("the probe interval must not be negative, not %s", s.Interval)
	case s.Timeout <= 0 || s.Timeout > s.Interval:
		return fmt.Errorf("the probe timeout must be positive and at most the interval %s, not %s", s.Interval, s.Timeout)
	case s.FailureThreshold < 1 || s.SuccessThreshold < 1:
		return fmt.Errorf("the failure and success thresholds must be at least 1, not %d and %d", s.FailureThreshold, s.SuccessThreshold)
	}
	if _, err := s.account(); err != nil {
		return err
	}
	return nil
}

func (s Settings) account() (types.NamespacedName, error) {
	if s.ServiceAccount == "" {
		return types.NamespacedName{}, nil
	}
	namespace, name, ok := strings.Cut(s.ServiceAccount, "/")
	if !ok || namespace == "" || name == "" || strings.Contains(name, "/") {
		return types.NamespacedName{}, fmt.Errorf("the probes' ServiceAccount must be namespace/name, not %q", s.ServiceAccount)
	}
	return types.NamespacedName{Namespace: namespace, Name: name}, nil
}

// State is what the probes say about one endpoint.
type State struct {
	// Ready is false after FailureThreshold failed probes in a row, until SuccessThreshold successful ones. An
	// endpoint that has not been probed yet counts as ready, as before there was probing.
	Ready bool
	// Reason is what the last failed probe got, while the endpoint is not ready.
	Reason string
}

// What a registry's probes are for, the purpose label of their metrics: the same kube-apiserver may be probed for both.
const (
	// PurposeEndpoints: whether the exposure publishes an endpoint as ready (the leader's registry).
	PurposeEndpoints = "endpoints"
	// PurposeL2Handover: whether the node that holds an L2 announcement lease still has a kube-apiserver (every
	// replica's registry, pkg/controller/l2handover).
	PurposeL2Handover = "l2-handover"
)

// Registry holds one prober per endpoint address, for the exposures that list it.
type Registry struct {
	purpose  string
	settings Settings
	client   *http.Client
	// changed is called with the exposures that list an address whose State changed, and a context that ends when
	// the address's prober stops: a callback that blocks must give up then.
	changed func(ctx context.Context, exposures []types.NamespacedName)

	mu sync.Mutex
	// ctx is cancelled by Stop; every prober runs below it.
	ctx    context.Context
	cancel context.CancelFunc
	// probers by address; users are the exposures that list each address, tracked the addresses of each.
	probers map[string]*prober
	users   map[string]sets.Set[types.NamespacedName]
	tracked map[types.NamespacedName][]string
	wg      sync.WaitGroup
	// running counts the probers' goroutines.
	running atomic.Int32
}

// NewRegistry returns a registry whose probes verify as config does under apiserverendpoints.ServerName and
// authenticate with tokens of settings.ServiceAccount (or as config does). changed is called from a prober's goroutine
// when its address's State changes, with the exposures that list it; purpose labels the metrics.
func NewRegistry(config *rest.Config, purpose string, settings Settings, changed func(ctx context.Context, exposures []types.NamespacedName)) (*Registry, error) {
	if err := settings.Validate(); err != nil {
		return nil, err
	}
	cfg := rest.CopyConfig(config)
	var tokens *serviceAccountTokens
	if account, _ := settings.account(); account.Name != "" {
		var err error
		if cfg, tokens, err = proberConfig(config, account); err != nil {
			return nil, err
		}
	}
	cfg.TLSClientConfig.ServerName = apiserverendpoints.ServerName
	// A probe reaches the one kube-apiserver it probes, never another that config's dialer falls back to
	// (pkg/apiserverfailover): that would report a stopped kube-apiserver ready.
	cfg.Dial = nil
	transport, err := rest.TransportFor(cfg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &Registry{
		purpose:  purpose,
		settings: settings,
		client: &http.Client{Transport: transport, Timeout: settings.Timeout,
			// The transport adds the token to every request, a redirected one too: a redirect is an answer (not ready),
			// never followed to wherever it points.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		changed: changed,
		ctx:     ctx, cancel: cancel,
		probers: map[string]*prober{},
		users:   map[string]sets.Set[types.NamespacedName]{},
		tracked: map[types.NamespacedName][]string{},
	}
	if tokens != nil && settings.Interval > 0 {
		r.wg.Go(func() { tokens.renewInBackground(ctx) })
	}
	return r, nil
}

// Track makes addresses (host:port) the endpoints of the exposure key: probers start for new addresses and stop for
// those no exposure lists any more.
func (r *Registry) Track(key types.NamespacedName, addresses []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ctx.Err() != nil || r.settings.Interval == 0 {
		return
	}
	for _, addr := range r.tracked[key] {
		if !slices.Contains(addresses, addr) {
			r.release(key, addr)
		}
	}
	for _, addr := range addresses {
		if r.users[addr] == nil {
			r.users[addr] = sets.New[types.NamespacedName]()
		}
		r.users[addr].Insert(key)
		if r.probers[addr] == nil {
			p := &prober{address: addr, registry: r, state: State{Ready: true}}
			ctx, cancel := context.WithCancel(r.ctx)
			p.cancel = cancel
			r.probers[addr] = p
			setReady(r.purpose, addr, true)
			r.wg.Go(func() { p.run(ctx) })
		}
	}
	r.tracked[key] = slices.Clone(addresses)
}

// Untrack stops probing for the exposure key.
func (r *Registry) Untrack(key types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, addr := range r.tracked[key] {
		r.release(key, addr)
	}
	delete(r.tracked, key)
}

// release drops key from the users of addr and stops its prober when nobody uses it. r.mu is held.
func (r *Registry) release(key types.NamespacedName, addr string) {
	r.users[addr].Delete(key)
	if len(r.users[addr]) > 0 {
		return
	}
	delete(r.users, addr)
	if p := r.probers[addr]; p != nil {
		p.cancel()
		delete(r.probers, addr)
		forget(r.purpose, addr)
	}
}

// Users are the exposures that list address.
func (r *Registry) Users(address string) []types.NamespacedName {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.SortedFunc(maps.Keys(r.users[address]), func(a, b types.NamespacedName) int {
		return strings.Compare(a.String(), b.String())
	})
}

// States are the states of addresses.
func (r *Registry) States(addresses []string) map[string]State {
	states := make(map[string]State, len(addresses))
	for _, addr := range addresses {
		states[addr] = r.State(addr)
	}
	return states
}

// State is the state of address; an address nobody tracks counts as ready.
func (r *Registry) State(address string) State {
	r.mu.Lock()
	p := r.probers[address]
	r.mu.Unlock()
	if p == nil {
		return State{Ready: true}
	}
	return p.get()
}

// Probers is how many probers run.
func (r *Registry) Probers() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.probers)
}

// Start runs until ctx ends and then stops every prober (a manager.Runnable). Only the leader probes: only it
// reconciles exposures.
func (r *Registry) Start(ctx context.Context) error {
	<-ctx.Done()
	r.Stop()
	return nil
}

// Stop stops every prober and waits until they have returned; Track does nothing afterwards.
func (r *Registry) Stop() {
	r.mu.Lock()
	r.cancel()
	r.mu.Unlock()
	r.wg.Wait()
	utilnet.CloseIdleConnectionsFor(r.client.Transport)
}

type prober struct {
	address  string
	registry *Registry
	cancel   context.CancelFunc

	mu                  sync.Mutex
	state               State
	failures, successes int
}

func (p *prober) get() State {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.state
}

func (p *prober) run(ctx context.Context) {
	p.registry.running.Add(1)
	defer p.registry.running.Add(-1)
	// No connection stays open to an endpoint nobody probes; the other probers' idle ones are dialled again.
	defer utilnet.CloseIdleConnectionsFor(p.registry.client.Transport)
	ticker := time.NewTicker(p.registry.settings.Interval)
	defer ticker.Stop()
	for {
		p.observe(ctx, p.probe(ctx))
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// probe asks the endpoint's kube-apiserver whether it is ready; nil means it is.
func (p *prober) probe(ctx context.Context) error {
	start := time.Now()
	defer func() {
		if ctx.Err() == nil {
			observeProbe(p.registry.purpose, p.address, time.Since(start))
		}
	}()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+p.address+"/readyz", nil)
	if err != nil {
		return err
	}
	resp, err := p.registry.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
		return fmt.Errorf("GET /readyz: %s: %s", resp.Status, body)
	}
	return nil
}

// observe counts the probe's result and changes the state at a threshold.
func (p *prober) observe(ctx context.Context, err error) {
	if ctx.Err() != nil {
		return // stopped during the probe: its failure says nothing about the endpoint
	}
	s := p.registry.settings
	p.mu.Lock()
	changed := false
	if err == nil {
		p.failures, p.successes = 0, p.successes+1
		if !p.state.Ready && p.successes >= s.SuccessThreshold {
			p.state, changed = State{Ready: true}, true
		}
	} else {
		p.failures, p.successes = p.failures+1, 0
		if p.state.Ready && p.failures >= s.FailureThreshold {
			p.state, changed = State{Ready: false, Reason: err.Error()}, true
		} else if !p.state.Ready {
			p.state.Reason = err.Error()
		}
	}
	ready := p.state.Ready
	p.mu.Unlock()
	if changed {
		transition(p.registry.purpose, p.address, ready)
		if p.registry.changed != nil {
			p.registry.changed(ctx, p.registry.Users(p.address))
		}
	}
}

// Publish decides which endpoints to publish as not ready, by address with the reason, from their states. When every
// endpoint is not ready (allFailing) it publishes none as not ready, as a VIP without a ready backend refuses every
// connection and the probing itself is suspect; a single control-plane node stays published whatever its probes say.
func Publish(states map[string]State) (notReady map[string]string, allFailing bool) {
	notReady = map[string]string{}
	for addr, s := range states {
		if !s.Ready {
			notReady[addr] = s.Reason
		}
	}
	if len(states) > 0 && len(notReady) == len(states) {
		return map[string]string{}, true
	}
	return notReady, false
}
