// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package app

import (
	"context"
	"fmt"
	"os"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/processmodel"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/webhookserver"
	"github.com/gardener/gardener-extension-cilium-selfhosted/webhook/apiserveraccess"
)

// addWebhooks wires the webhooks into the process's manager, which serves them in every replica whether it leads or
// not. Gardener's wiring (extensions/pkg/webhook/cmd/options.go AddToManager, webhook/certificates/add.go) adds to one
// manager both what every replica runs (the handlers, the reloader of the server certificate) and what only the leader
// runs (registering the MutatingWebhookConfiguration, rotating the CA and server certificate); the second half goes to
// each leader term (addLeaderWebhookParts). With unmanaged certificates (no --webhook-config-namespace, for
// development) the certificates are generated when the wiring runs, so it runs once, in the process's manager, and
// each replica registers its own CA.
func (o *options) addWebhooks(ctx context.Context, mgr manager.Manager) error {
	mgr = withMatchConditions{Manager: mgr}
	if o.registeringWebhookServer != nil {
		mgr = withWebhookServer{Manager: mgr, server: o.registeringWebhookServer}
	}
	if o.unmanagedWebhookCertificates() {
		_, err := o.webhooks.Completed().AddToManager(ctx, mgr, nil)
		return err
	}
	_, err := o.webhooks.Completed().AddToManager(ctx, runnablesNeedingLeadership{Manager: mgr, leader: false}, nil)
	return err
}

// addLeaderWebhookParts adds the leader's half of Gardener's webhook wiring to a term. The wiring registers the
// handlers again, on a server of the term's that never starts, and writes the server certificate into its directory,
// a folder of its own in the process's certificate directory (the container's one writable place there) that is
// dropped right away.
func (o *options) addLeaderWebhookParts(ctx context.Context, process, term manager.Manager) error {
	if o.unmanagedWebhookCertificates() {
		return nil
	}
	server, ok := process.GetWebhookServer().(*webhook.DefaultServer)
	if !ok {
		return fmt.Errorf("expected *webhook.DefaultServer, got %T", process.GetWebhookServer())
	}
	certDir, err := os.MkdirTemp(server.Options.CertDir, ".leader-term-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(certDir)
	unserved := webhook.NewServer(webhook.Options{CertDir: certDir})
	_, err = o.webhooks.Completed().AddToManager(ctx, runnablesNeedingLeadership{Manager: withMatchConditions{Manager: term}, leader: true, server: unserved, registrationFirst: &registrationFirst{done: make(chan struct{})}}, nil)
	return err
}

func (o *options) unmanagedWebhookCertificates() bool {
	return o.webhooks.Server.Completed().Namespace == ""
}

// leaderTerms runs the controllers and the leader's half of the webhook wiring in leader terms (pkg/processmodel), so
// that a lost lease never stops the webhook server.
func (o *options) leaderTerms(ctx context.Context, config *rest.Config, process manager.Manager, options manager.Options) (*processmodel.Terms, error) {
	var lock processmodel.Lock
	if options.LeaderElection {
		var err error
		if lock, err = processmodel.NewLock(config, process, options); err != nil {
			return nil, fmt.Errorf("could not create the leader lock: %w", err)
		}
	}
	return &processmodel.Terms{
		Config: config, Process: process, Lock: lock, Options: options,
		Log: process.GetLogger().WithName("leadership"),
		Fill: func(term manager.Manager) error {
			if err := o.addLeaderWebhookParts(ctx, process, term); err != nil {
				return fmt.Errorf("could not add the leader's webhook parts: %w", err)
			}
			if err := o.controllers.Completed().AddToManager(ctx, term); err != nil {
				return fmt.Errorf("could not add controllers: %w", err)
			}
			return nil
		},
	}, nil
}

// runnablesNeedingLeadership keeps only the runnables added to it that need leader election (leader) or only those
// that do not, and drops the others.
type runnablesNeedingLeadership struct {
	manager.Manager
	leader bool
	// server, when set, stands in for the manager's webhook server.
	server webhook.Server
	// registrationFirst, when set, holds the runnables back until the first, the one-shot registration, has succeeded.
	registrationFirst *registrationFirst
}

// registrationFirst orders the leader's half of Gardener's webhook wiring: its one-shot registration Gets the
// MutatingWebhookConfiguration into the very object the certificate reconciler deep-copies as its source
// (extensions/pkg/webhook/cmd/options.go AddToManager passes seedWebhookConfigs to both), so a reconcile during that
// Get sent a half-decoded webhook, which the chart's -confine-webhook-configuration pin refused
// (docs/development/testing.md, Flakes).
type registrationFirst struct {
	done    chan struct{}
	started bool
}

// registrationType is the type of Gardener's one-shot registration, the first runnable its wiring adds.
const registrationType = "cmd.runOnceWithLeaderElection"

// add wraps r: the registration closes done once it succeeded, every later runnable waits for that.
func (g *registrationFirst) add(r manager.Runnable) (manager.Runnable, error) {
	if g.started {
		return g.after(r), nil
	}
	if t := fmt.Sprintf("%T", r); t != registrationType {
		return nil, fmt.Errorf("gardener's webhook wiring added %s first, not its registration %s: the order of its leader half changed", t, registrationType)
	}
	g.started = true
	return g.registration(r), nil
}

func (g *registrationFirst) registration(r manager.Runnable) manager.Runnable {
	return leaderRunnable(func(ctx context.Context) error {
		if err := r.Start(ctx); err != nil {
			return err
		}
		close(g.done)
		return nil
	})
}

func (g *registrationFirst) after(r manager.Runnable) manager.Runnable {
	return leaderRunnable(func(ctx context.Context) error {
		select {
		case <-g.done:
			if ctx.Err() != nil {
				return nil
			}
			return r.Start(ctx)
		case <-ctx.Done():
			return nil
		}
	})
}

// leaderRunnable is a runnable that runs only while leading.
type leaderRunnable func(context.Context) error

func (r leaderRunnable) Start(ctx context.Context) error { return r(ctx) }
func (r leaderRunnable) NeedLeaderElection() bool        { return true }

// webhookLimits hold every caller of the webhook server to what kube-apiserver needs of it: a call is over after the
// webhooks' timeout on kube-apiserver's side, so reading a body, or waiting for a slot, longer than that serves no one.
// Eight requests at once, each buffering at most 7 MiB, keep a flood from the node network within the chart's memory
// limit (make bench, section 2); kube-apiserver's calls are answered in milliseconds.
var webhookLimits = webhookserver.Limits{
	ReadTimeout:   time.Duration(apiserveraccess.TimeoutSeconds) * time.Second,
	HandleTimeout: time.Duration(apiserveraccess.TimeoutSeconds) * time.Second,
	InFlight:      8,
}

// withMatchConditions is a manager whose client writes the webhooks' match conditions into the
// MutatingWebhookConfiguration that Gardener's wiring registers with it (apiserveraccess.WithMatchConditions).
type withMatchConditions struct{ manager.Manager }

func (m withMatchConditions) GetClient() client.Client {
	return apiserveraccess.WithMatchConditions(m.Manager.GetClient())
}

// withWebhookServer is a manager whose webhook server is server, for Gardener's wiring, which registers its handlers
// through GetWebhookServer: the registering half of webhookserver.Servers, whose serving half the manager runs.
type withWebhookServer struct {
	manager.Manager
	server webhook.Server
}

func (m withWebhookServer) GetWebhookServer() webhook.Server { return m.server }

func (m runnablesNeedingLeadership) Add(r manager.Runnable) error {
	if processmodel.NeedsLeaderElection(r) != m.leader {
		return nil
	}
	if m.registrationFirst != nil {
		var err error
		if r, err = m.registrationFirst.add(r); err != nil {
			return err
		}
	}
	return m.Manager.Add(r)
}

func (m runnablesNeedingLeadership) GetWebhookServer() webhook.Server {
	if m.server != nil {
		return m.server
	}
	return m.Manager.GetWebhookServer()
}
