// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package processmodel

import (
	"context"
	"math"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/leaderelection"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
)

// lostLease is how controller-runtime's manager reports a lost lease (pkg/manager/internal.go); it has no error type
// for it.
const lostLease = "leader election lost"

// Terms is a runnable of the process's manager that runs one term after the other until the process stops.
type Terms struct {
	// Config is the REST config of the terms' managers.
	Config *rest.Config
	// Process is the process's manager, whose scheme, cache, client and REST mapper the terms share.
	Process manager.Manager
	// Lock is the lease lock of the process (NewLock); nil runs one term without leader election.
	Lock Lock
	// Options are the process's manager options; the terms take the lease timings and controller options from them.
	Options manager.Options
	// Fill adds everything leader-elected to a term's manager. It is called once per term, as controllers start only
	// once.
	Fill func(term manager.Manager) error
	Log  logr.Logger
}

// NeedLeaderElection implements manager.LeaderElectionRunnable: the terms campaign themselves.
func (*Terms) NeedLeaderElection() bool { return false }

// Start implements manager.Runnable. A term ends when it loses the lease or one of its runnables fails (most often
// because kube-apiserver went away at the wrong moment, e.g. while Gardener's webhook wiring registers the webhook
// configuration); the next term follows at once after a lost lease and after a growing pause after failures in a row.
func (t *Terms) Start(ctx context.Context) error {
	failed := failureBackoff.DelayFunc()
	for number := 1; ; number++ {
		term, err := t.build(ctx, number)
		if err != nil {
			return nil // only when ctx ended
		}
		began := time.Now()
		err = term.Start(ctx)
		term.end(t.Log.WithValues("term", number))
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil && strings.Contains(err.Error(), lostLease):
			t.Log.Info("Lost the leader lease; campaigning again, webhooks keep being served", "term", number)
			continue
		}
		if time.Since(began) > failureBackoff.Cap {
			failed = failureBackoff.DelayFunc() // not a failure in a row
		}
		pause := failed()
		t.Log.Error(err, "Leader term failed; campaigning again after a pause, webhooks keep being served", "term", number, "pause", pause)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(pause):
		}
	}
}

// failureBackoff spaces terms that fail in a row: at first soon, as a failure is most often kube-apiserver going
// away, and at most a minute apart, as kubelet's CrashLoopBackOff would have for a process that exits.
var failureBackoff = wait.Backoff{Duration: time.Second, Factor: 2, Jitter: 0.2, Cap: time.Minute, Steps: math.MaxInt32}

// term is one term's manager, with its runnables counted while they run and the process's cache as it shares it.
type term struct {
	manager.Manager
	cache   *sharedCache
	running atomic.Int64
}

// build builds a term until it succeeds or ctx ends. Building may need kube-apiserver (Gardener's webhook wiring reads
// its certificates then), which is often still down when a lease has just been lost.
func (t *Terms) build(ctx context.Context, number int) (*term, error) {
	var built *term
	err := buildBackoff.DelayFunc().Until(ctx, true, false, func(context.Context) (bool, error) {
		shared := &sharedCache{Cache: t.Process.GetCache()}
		mgr, err := manager.New(t.Config, termOptions(t.Process, t.Lock, t.Options, shared))
		if err == nil {
			built = &term{Manager: mgr, cache: shared}
			err = t.Fill(built)
		}
		if err != nil {
			shared.removeHandlers()
			t.Log.Error(err, "Could not build the leader term; trying again", "term", number)
			return false, nil
		}
		return true, nil
	})
	return built, err
}

// Add implements manager.Manager: it counts the term's runnables while they run. Servers and caches it leaves as they
// are, as the manager sorts them by their type.
func (t *term) Add(r manager.Runnable) error {
	switch r.(type) {
	case *manager.Server, interface{ GetCache() cache.Cache }, webhook.Server:
		return t.Manager.Add(r)
	}
	return t.Manager.Add(&countedRunnable{Runnable: r, running: &t.running})
}

// end waits until the term's runnables have stopped: after a lost lease controller-runtime's manager returns without
// waiting for them (OnStoppedLeading sets its graceful shutdown timeout to 0), and the next term's controllers must
// not run beside them. Then it removes the term's event handlers from the process's informers, which outlive it.
func (t *term) end(log logr.Logger) {
	if err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, termShutdownTimeout, true,
		func(context.Context) (bool, error) { return t.running.Load() == 0, nil }); err != nil {
		log.Info("Runnables of the ended leader term still run", "running", t.running.Load(), "waited", termShutdownTimeout)
	}
	t.cache.removeHandlers()
}

// termShutdownTimeout bounds the wait for an ended term's runnables, as controller-runtime's graceful shutdown does.
const termShutdownTimeout = 30 * time.Second

// countedRunnable counts itself while it runs and keeps its kind of leader election.
type countedRunnable struct {
	manager.Runnable
	running *atomic.Int64
}

func (r *countedRunnable) Start(ctx context.Context) error {
	r.running.Add(1)
	defer r.running.Add(-1)
	return r.Runnable.Start(ctx)
}

func (r *countedRunnable) NeedLeaderElection() bool { return NeedsLeaderElection(r.Runnable) }

// NeedsLeaderElection tells whether the manager runs r only while leading: what r says, and yes when it says nothing
// (controller-runtime's default, pkg/manager/runnable_group.go).
func NeedsLeaderElection(r manager.Runnable) bool {
	if l, ok := r.(manager.LeaderElectionRunnable); ok {
		return l.NeedLeaderElection()
	}
	return true
}

// buildBackoff spaces the attempts to build a term as client-go's leader election spaces its attempts to acquire the
// lease (controller-runtime's RetryPeriod, 2 s): a term that has just lost its lease is rebuilt within that of
// kube-apiserver coming back, and the attempts cost two reads each.
var buildBackoff = wait.Backoff{Duration: 2 * time.Second, Jitter: 0.2, Steps: math.MaxInt32}

// NewLock returns the one lease lock of the process, from the leader election fields of options. One lock keeps one
// identity across terms: when kube-apiserver comes back after the lease was lost, the next term finds itself the
// holder and leads at once instead of waiting out the lease duration (client-go's tryAcquireOrRenew); the previous
// term's runnables have stopped by then (term.end). controller-runtime's NewResourceLock sets its user agent and a
// timeout of half the renew deadline on the config it is given (pkg/leaderelection): it gets a copy, or the terms'
// informers, built from config, had their watches cut after 5 s, over and over.
func NewLock(config *rest.Config, process manager.Manager, options manager.Options) (Lock, error) {
	return leaderelection.NewResourceLock(rest.CopyConfig(config), process, leaderelection.Options{
		LeaderElection:             true,
		LeaderElectionResourceLock: options.LeaderElectionResourceLock,
		LeaderElectionID:           options.LeaderElectionID,
		LeaderElectionNamespace:    options.LeaderElectionNamespace,
		// controller-runtime's default renew deadline, which also bounds the lock's requests (half of it).
		RenewDeadline: ptr.Deref(options.RenewDeadline, 10*time.Second),
		LeaderLabels:  options.LeaderElectionLabels,
	})
}

// Lock is the lease lock the terms campaign on.
type Lock = resourcelock.Interface

// termOptions are the options of a term's manager: leader election as in options on lock (none if lock is nil), the
// process's scheme, client and REST mapper, its cache as shared, and no servers of its own. Controller names repeat in
// every term, so their process-wide uniqueness check is off.
func termOptions(process manager.Manager, lock Lock, options manager.Options, shared *sharedCache) manager.Options {
	controllers := options.Controller
	controllers.SkipNameValidation = ptr.To(true)
	return manager.Options{
		Scheme:                              process.GetScheme(),
		Logger:                              process.GetLogger(),
		LeaderElection:                      lock != nil,
		LeaderElectionResourceLockInterface: lock,
		LeaderElectionReleaseOnCancel:       options.LeaderElectionReleaseOnCancel,
		LeaseDuration:                       options.LeaseDuration,
		RenewDeadline:                       options.RenewDeadline,
		RetryPeriod:                         options.RetryPeriod,
		Controller:                          controllers,
		Metrics:                             metricsserver.Options{BindAddress: "0"},
		MapperProvider:                      func(*rest.Config, *http.Client) (meta.RESTMapper, error) { return process.GetRESTMapper(), nil },
		NewCache:                            func(*rest.Config, cache.Options) (cache.Cache, error) { return shared, nil },
		NewClient:                           func(*rest.Config, client.Options) (client.Client, error) { return process.GetClient(), nil },
	}
}

// sharedCache is the process's cache in a term's manager. The term starts it as its own, but the process started it
// already and stops it. The term's controllers register event handlers on its informers, which outlive the term: it
// keeps them, for the term's end to remove.
type sharedCache struct {
	cache.Cache
	mu       sync.Mutex
	handlers []registered
}

type registered struct {
	informer cache.Informer
	handle   toolscache.ResourceEventHandlerRegistration
}

func (*sharedCache) Start(ctx context.Context) error {
	<-ctx.Done()
	return nil
}

func (c *sharedCache) GetInformer(ctx context.Context, obj client.Object, opts ...cache.InformerGetOption) (cache.Informer, error) {
	i, err := c.Cache.GetInformer(ctx, obj, opts...)
	return c.track(i), err
}

func (c *sharedCache) GetInformerForKind(ctx context.Context, gvk schema.GroupVersionKind, opts ...cache.InformerGetOption) (cache.Informer, error) {
	i, err := c.Cache.GetInformerForKind(ctx, gvk, opts...)
	return c.track(i), err
}

func (c *sharedCache) track(i cache.Informer) cache.Informer {
	if i == nil {
		return nil
	}
	return &trackedInformer{Informer: i, cache: c}
}

func (c *sharedCache) add(i cache.Informer, handle toolscache.ResourceEventHandlerRegistration, err error) (toolscache.ResourceEventHandlerRegistration, error) {
	if err == nil {
		c.mu.Lock()
		c.handlers = append(c.handlers, registered{informer: i, handle: handle})
		c.mu.Unlock()
	}
	return handle, err
}

// removeHandlers removes the event handlers the term registered.
func (c *sharedCache) removeHandlers() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, h := range c.handlers {
		_ = h.informer.RemoveEventHandler(h.handle)
	}
	c.handlers = nil
}

// trackedInformer is an informer of the process's cache whose event handlers the term's sharedCache keeps.
type trackedInformer struct {
	cache.Informer
	cache *sharedCache
}

func (i *trackedInformer) AddEventHandler(h toolscache.ResourceEventHandler) (toolscache.ResourceEventHandlerRegistration, error) {
	handle, err := i.Informer.AddEventHandler(h)
	return i.cache.add(i.Informer, handle, err)
}

func (i *trackedInformer) AddEventHandlerWithResyncPeriod(h toolscache.ResourceEventHandler, resync time.Duration) (toolscache.ResourceEventHandlerRegistration, error) {
	handle, err := i.Informer.AddEventHandlerWithResyncPeriod(h, resync)
	return i.cache.add(i.Informer, handle, err)
}

func (i *trackedInformer) AddEventHandlerWithOptions(h toolscache.ResourceEventHandler, o toolscache.HandlerOptions) (toolscache.ResourceEventHandlerRegistration, error) {
	handle, err := i.Informer.AddEventHandlerWithOptions(h, o)
	return i.cache.add(i.Informer, handle, err)
}
