// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package processmodel_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache/informertest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/processmodel"
)

// lock is a lease lock in memory that stands for the Lease in kube-apiserver; while down, every call fails as when
// kube-apiserver is unreachable.
type lock struct {
	mu     sync.Mutex
	down   bool
	record *resourcelock.LeaderElectionRecord
}

var errUnreachable = errors.New("kube-apiserver unreachable")

func (l *lock) Get(context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.down {
		return nil, nil, errUnreachable
	}
	if l.record == nil {
		return nil, nil, apierrors.NewNotFound(schema.GroupResource{Resource: "leases"}, "test")
	}
	raw, err := json.Marshal(l.record)
	record := *l.record
	return &record, raw, err
}

func (l *lock) write(record resourcelock.LeaderElectionRecord) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.down {
		return errUnreachable
	}
	l.record = &record
	return nil
}

func (l *lock) Create(_ context.Context, r resourcelock.LeaderElectionRecord) error {
	return l.write(r)
}
func (l *lock) Update(_ context.Context, r resourcelock.LeaderElectionRecord) error {
	return l.write(r)
}
func (*lock) RecordEvent(string) {}
func (*lock) Identity() string   { return "replica-a" }
func (*lock) Describe() string   { return "test/lease" }

func (l *lock) setDown(down bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.down = down
}

func (l *lock) holder() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.record == nil {
		return ""
	}
	return l.record.HolderIdentity
}

// leaderWork is a leader-elected runnable that records when it runs.
type leaderWork struct {
	mu       sync.Mutex
	running  int
	stopping int
	starts   int
	overlap  bool
	err      error
}

func (w *leaderWork) Start(ctx context.Context) error {
	w.mu.Lock()
	w.starts++
	w.running++
	w.overlap = w.overlap || w.running > 1
	err := w.err
	w.mu.Unlock()
	if err == nil {
		<-ctx.Done()
		w.mu.Lock()
		w.stopping++
		w.mu.Unlock()
		// Stopping takes a while (a reconciliation finishing): the next term must wait for it.
		time.Sleep(300 * time.Millisecond)
	}
	w.mu.Lock()
	w.running--
	w.mu.Unlock()
	return err
}

func (w *leaderWork) stopped() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stopping
}

func (w *leaderWork) state() (running, starts int, overlap bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.running, w.starts, w.overlap
}

// process is the process's manager: a cache and client of its own, never started here (the fake cache is synced).
// Its informers count the event handlers registered on them (handlers).
func process(t *testing.T) manager.Manager {
	t.Helper()
	informers := &countingInformers{FakeInformers: &informertest.FakeInformers{}}
	c := fake.NewClientBuilder().Build()
	mgr, err := manager.New(&rest.Config{Host: "https://127.0.0.1:1"}, manager.Options{
		Scheme:         runtime.NewScheme(),
		Metrics:        metricsserver.Options{BindAddress: "0"},
		MapperProvider: func(*rest.Config, *http.Client) (meta.RESTMapper, error) { return meta.NewDefaultRESTMapper(nil), nil },
		NewCache:       func(*rest.Config, cache.Options) (cache.Cache, error) { return informers, nil },
		NewClient:      func(*rest.Config, client.Options) (client.Client, error) { return c, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	return mgr
}

// handlers is the number of event handlers registered on the process's informers and not removed.
var handlers atomic.Int64

type countingInformers struct{ *informertest.FakeInformers }

func (c *countingInformers) GetInformer(ctx context.Context, obj client.Object, opts ...cache.InformerGetOption) (cache.Informer, error) {
	i, err := c.FakeInformers.GetInformer(ctx, obj, opts...)
	return &countingInformer{Informer: i}, err
}

type countingInformer struct{ cache.Informer }

func (i *countingInformer) AddEventHandler(h toolscache.ResourceEventHandler) (toolscache.ResourceEventHandlerRegistration, error) {
	handlers.Add(1)
	return i.Informer.AddEventHandler(h)
}

func (i *countingInformer) RemoveEventHandler(r toolscache.ResourceEventHandlerRegistration) error {
	handlers.Add(-1)
	return i.Informer.RemoveEventHandler(r)
}

// fast are lease timings that keep the test short; client-go requires lease > renew > 1.2 × retry.
var fast = manager.Options{
	LeaseDuration: ptr.To(600 * time.Millisecond),
	RenewDeadline: ptr.To(400 * time.Millisecond),
	RetryPeriod:   ptr.To(100 * time.Millisecond),
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting until %s", what)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// terms starts Terms whose terms run work on l and register an event handler on the process's Node informer;
// builds counts the terms built, failing the first failBuilds. stop stops the process and returns what Terms
// returned; done reports what Terms returned on its own.
func terms(t *testing.T, l *lock, work *leaderWork, failBuilds int) (stop func() error, done <-chan error, builds func() int) {
	t.Helper()
	proc := process(t)
	var (
		mu    sync.Mutex
		built int
	)
	ts := &processmodel.Terms{
		Config: &rest.Config{Host: "https://127.0.0.1:1"}, Process: proc, Lock: l, Options: fast,
		Fill: func(term manager.Manager) error {
			mu.Lock()
			defer mu.Unlock()
			built++
			if built <= failBuilds {
				return errUnreachable
			}
			if term.GetClient() != proc.GetClient() {
				t.Error("a term has a client of its own, not the process's")
			}
			informer, err := term.GetCache().GetInformer(context.Background(), &corev1.Node{})
			if err != nil {
				return err
			}
			if _, err := informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{}); err != nil {
				return err
			}
			return term.Add(work)
		},
	}
	ctx, cancel := context.WithCancel(context.Background())
	ended := make(chan error, 1)
	go func() { ended <- ts.Start(ctx) }()
	t.Cleanup(cancel)
	return func() error {
			cancel()
			return <-ended
		}, ended, func() int {
			mu.Lock()
			defer mu.Unlock()
			return built
		}
}

// TestLostLeaseStartsNextTerm: kube-apiserver unreachable for longer than the renew deadline ends the term, not Terms;
// the next term leads as soon as it is reachable again, with the same identity, and the two terms' work never runs at
// once.
func TestLostLeaseStartsNextTerm(t *testing.T) {
	l, work := &lock{}, &leaderWork{}
	stop, _, builds := terms(t, l, work, 0)
	waitFor(t, "the first term leads", func() bool { running, _, _ := work.state(); return running == 1 })

	l.setDown(true)
	waitFor(t, "the first term ends", func() bool { running, _, _ := work.state(); return running == 0 && builds() == 2 })
	l.setDown(false)
	waitFor(t, "the second term leads", func() bool { running, starts, _ := work.state(); return running == 1 && starts == 2 })
	if h := l.holder(); h != "replica-a" {
		t.Errorf("the lease is held by %q, want the process's one identity", h)
	}
	if _, _, overlap := work.state(); overlap {
		t.Error("two terms' leader work ran at once")
	}
	if n := handlers.Load(); n != 1 {
		t.Errorf("%d event handlers on the process's informers, want only the running term's", n)
	}
	if err := stop(); err != nil {
		t.Errorf("Terms ended with %v, want nil when the process stops", err)
	}
	if running, _, _ := work.state(); running != 0 {
		t.Error("the leader work runs on after the process stopped")
	}
}

// TestNoOverlapWhenTheLeaseComesBackAtOnce: kube-apiserver is away just long enough to lose the lease and back while
// the ended term's work is still stopping; with the same identity the next term could lead at once, and must wait.
func TestNoOverlapWhenTheLeaseComesBackAtOnce(t *testing.T) {
	l, work := &lock{}, &leaderWork{}
	stop, _, _ := terms(t, l, work, 0)
	waitFor(t, "the first term leads", func() bool { running, _, _ := work.state(); return running == 1 })
	l.setDown(true)
	waitFor(t, "the first term's work is stopping", func() bool { return work.stopped() == 1 })
	l.setDown(false)
	waitFor(t, "the second term leads", func() bool { running, starts, _ := work.state(); return running == 1 && starts == 2 })
	if _, _, overlap := work.state(); overlap {
		t.Error("the second term's work started while the first's was still stopping")
	}
	if err := stop(); err != nil {
		t.Error(err)
	}
}

// TestTermBuiltAgainUntilItSucceeds: building a term can fail while kube-apiserver is down; it is tried again.
func TestTermBuiltAgainUntilItSucceeds(t *testing.T) {
	l, work := &lock{}, &leaderWork{}
	stop, _, builds := terms(t, l, work, 1)
	waitFor(t, "the term built on the second attempt leads", func() bool { running, _, _ := work.state(); return running == 1 })
	if n := builds(); n != 2 {
		t.Errorf("%d builds, want 2", n)
	}
	if err := stop(); err != nil {
		t.Error(err)
	}
}

// TestFailedTermIsFollowedByAnother: a term whose runnable fails (kube-apiserver went away while it registered the
// webhook configuration) ends, and another term follows; the process goes on.
func TestFailedTermIsFollowedByAnother(t *testing.T) {
	l, work := &lock{}, &leaderWork{err: errors.New("controller failed")}
	stop, done, builds := terms(t, l, work, 0)
	waitFor(t, "a second term", func() bool { _, starts, _ := work.state(); return starts >= 2 && builds() >= 2 })
	select {
	case err := <-done:
		t.Fatalf("Terms ended with %v after a failed term", err)
	default:
	}
	if err := stop(); err != nil {
		t.Error(err)
	}
}
