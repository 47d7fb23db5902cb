// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package processmodel_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/processmodel"
)

// The controller-runtime behaviour the process model rests on (docs/development/process-model.md), pinned by name: a
// release that changes it fails here, not on a shoot.

// TestControllerRuntimeManagerExitsOnLostLease: a manager that campaigns returns from Start with "leader election
// lost" once it cannot renew its lease (sigs.k8s.io/controller-runtime pkg/manager/internal.go, OnStoppedLeading),
// taking every runnable with it, the webhook server too. That is why the process's manager never campaigns and the
// leader-elected half runs in Terms, which recognise the same error.
func TestControllerRuntimeManagerExitsOnLostLease(t *testing.T) {
	l := &lock{}
	options := fast
	options.LeaderElection = true
	options.LeaderElectionResourceLockInterface = l
	mgr := process(t)
	crm, err := manager.New(&rest.Config{Host: "https://127.0.0.1:1"}, withCacheAndClient(options, mgr))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ended := make(chan error, 1)
	go func() { ended <- crm.Start(ctx) }()
	<-crm.Elected()
	l.setDown(true)
	select {
	case err := <-ended:
		if err == nil || !strings.Contains(err.Error(), processmodel.LostLease) {
			t.Errorf("the manager ended with %v, want an error containing %q", err, processmodel.LostLease)
		}
	case <-ctx.Done():
		t.Fatal("the manager ran on after its lease was lost")
	}
}

// TestNewLockLeavesItsConfig: controller-runtime's NewResourceLock sets a user agent and a timeout on the config it
// is given (pkg/leaderelection); the terms are built from the same config, and with that timeout every watch of
// theirs ended after 5 s (the audit log of make test in session 34).
func TestNewLockLeavesItsConfig(t *testing.T) {
	config := &rest.Config{Host: "https://127.0.0.1:1"}
	if _, err := processmodel.NewLock(config, process(t), manager.Options{LeaderElectionID: "test", LeaderElectionNamespace: "default"}); err != nil {
		t.Fatal(err)
	}
	if config.Timeout != 0 || config.UserAgent != "" {
		t.Errorf("NewLock changed its config: timeout %s, user agent %q", config.Timeout, config.UserAgent)
	}
}

// TestNeedsLeaderElection: a runnable that does not say runs only while leading, as controller-runtime's manager
// sorts it (pkg/manager/runnable_group.go), and Terms and the webhook wiring split by the same rule.
func TestNeedsLeaderElection(t *testing.T) {
	plain := manager.RunnableFunc(func(context.Context) error { return nil })
	if !processmodel.NeedsLeaderElection(plain) {
		t.Error("a runnable that says nothing is taken to run in every replica; controller-runtime runs it only while leading")
	}
	if processmodel.NeedsLeaderElection(&processmodel.Terms{}) {
		t.Error("Terms need leader election: they campaign themselves, in every replica")
	}
}

// withCacheAndClient are options whose manager shares mgr's cache, client, scheme and REST mapper, as process's does.
func withCacheAndClient(options manager.Options, mgr manager.Manager) manager.Options {
	options.Scheme = mgr.GetScheme()
	options.Metrics = metricsserver.Options{BindAddress: "0"}
	options.MapperProvider = func(*rest.Config, *http.Client) (meta.RESTMapper, error) { return mgr.GetRESTMapper(), nil }
	options.NewCache = func(*rest.Config, cache.Options) (cache.Cache, error) { return mgr.GetCache(), nil }
	options.NewClient = func(*rest.Config, client.Options) (client.Client, error) { return mgr.GetClient(), nil }
	return options
}
