// Package leadership runs the leader-elected half of a process in terms, so that losing the leader lease, or
// kube-apiserver going away, ends a term and never the process.
//
// controller-runtime's manager treats a lost lease as fatal: its Start returns "leader election lost" and the process
// exits (sigs.k8s.io/controller-runtime/pkg/manager/internal.go, OnStoppedLeading). With one control-plane node that
// happens whenever kube-apiserver is down for longer than the renew deadline — its static pod restarts on every etcd
// or certificate change — and the exit takes the webhook server with it, which Cilium's pods need to be admitted.
// Here the process's manager runs no leader election: it serves the webhooks, metrics and probes, and holds the
// informers. Each term is a manager of its own, built anew because controllers start only once, that campaigns on one
// lock for the whole process and shares the process's cache and client; a lost lease ends the term and the next one
// campaigns at once.
package leadership

import (
	"context"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/leaderelection"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// lostLease is how controller-runtime's manager reports a lost lease (pkg/manager/internal.go); it has no error type
// for it.
const lostLease = "leader election lost"

// Terms is a runnable of the process's manager that runs one term after the other until the process stops.
type Terms struct {
	// New builds the manager of a term with everything leader-elected added to it, from TermOptions.
	New func() (manager.Manager, error)
	Log logr.Logger
}

// NeedLeaderElection implements manager.LeaderElectionRunnable: the terms campaign themselves.
func (*Terms) NeedLeaderElection() bool { return false }

// Start implements manager.Runnable. A term ends when it loses the lease or one of its runnables fails (most often
// because kube-apiserver went away at the wrong moment, e.g. while Gardener's webhook wiring registers the webhook
// configuration); the next term follows at once after a lost lease and after a growing pause after a failure.
func (t *Terms) Start(ctx context.Context) error {
	failed := failureBackoff.DelayFunc()
	for term := 1; ; term++ {
		mgr, err := t.build(ctx, term)
		if err != nil {
			return nil // only when ctx ended
		}
		err = mgr.Start(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil && strings.Contains(err.Error(), lostLease) {
			t.Log.Info("Lost the leader lease; campaigning again, webhooks keep being served", "term", term)
			continue
		}
		pause := failed()
		t.Log.Error(err, "Leader term failed; campaigning again after a pause, webhooks keep being served", "term", term, "pause", pause)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(pause):
		}
	}
}

// failureBackoff spaces terms that fail: at first soon, as a failure is most often kube-apiserver going away, and at
// most a minute apart, as kubelet's CrashLoopBackOff would have for a process that exits.
var failureBackoff = wait.Backoff{Duration: time.Second, Factor: 2, Jitter: 0.2, Cap: time.Minute, Steps: math.MaxInt32}

// build builds a term until it succeeds or ctx ends. Building may need kube-apiserver (Gardener's webhook wiring reads
// its certificates then), which is often still down when a lease has just been lost.
func (t *Terms) build(ctx context.Context, term int) (manager.Manager, error) {
	var mgr manager.Manager
	err := buildBackoff.DelayFunc().Until(ctx, true, false, func(context.Context) (bool, error) {
		var err error
		if mgr, err = t.New(); err != nil {
			t.Log.Error(err, "Could not build the leader term; trying again", "term", term)
			return false, nil
		}
		return true, nil
	})
	return mgr, err
}

// buildBackoff spaces the attempts to build a term as client-go's leader election spaces its attempts to acquire the
// lease (controller-runtime's RetryPeriod, 2 s): a term that has just lost its lease is rebuilt within that of
// kube-apiserver coming back, and the attempts cost two reads each.
var buildBackoff = wait.Backoff{Duration: 2 * time.Second, Jitter: 0.2, Steps: math.MaxInt32}

// NewLock returns the one lease lock of the process, from the leader election fields of options. One lock keeps one
// identity across terms: when kube-apiserver comes back after the lease was lost, the next term finds itself the
// holder and leads at once instead of waiting out the lease duration (client-go's tryAcquireOrRenew). By then the
// previous term has been stopped for longer than the renew deadline.
func NewLock(config *rest.Config, process manager.Manager, options manager.Options) (Lock, error) {
	return leaderelection.NewResourceLock(config, process, leaderelection.Options{
		LeaderElection:             true,
		LeaderElectionResourceLock: options.LeaderElectionResourceLock,
		LeaderElectionID:           options.LeaderElectionID,
		LeaderElectionNamespace:    options.LeaderElectionNamespace,
		RenewDeadline:              ptr.Deref(options.RenewDeadline, 0),
		LeaderLabels:               options.LeaderElectionLabels,
	})
}

// TermOptions are the options of a term's manager: leader election as in options on lock (none if lock is nil), the
// process's scheme, cache, client and REST mapper, and no servers of its own. Controller names repeat in every term,
// so their process-wide uniqueness check is off.
func TermOptions(process manager.Manager, lock Lock, options manager.Options) manager.Options {
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
		NewCache: func(*rest.Config, cache.Options) (cache.Cache, error) {
			return sharedCache{process.GetCache()}, nil
		},
		NewClient: func(*rest.Config, client.Options) (client.Client, error) { return process.GetClient(), nil },
	}
}

// sharedCache is the process's cache in a term's manager, which starts it as its own: the process started it already
// and stops it.
type sharedCache struct{ cache.Cache }

func (sharedCache) Start(ctx context.Context) error {
	<-ctx.Done()
	return nil
}

// Lock is the lease lock the terms campaign on.
type Lock = resourcelock.Interface
