// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package processmodel

import (
	"context"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
)

// Gardener's webhook wiring (extensions/pkg/webhook/cmd/options.go AddToManager, webhook/certificates/add.go) adds to
// one manager both what every replica runs (the handlers, the reloader of the server certificate) and what only the
// leader runs (the one-shot registration of the MutatingWebhookConfiguration, the certificate reconciler). The
// extension runs the wiring twice, through these managers: once for the process, once per term.

// EveryReplicaWebhooks is the process's manager mgr for Gardener's webhook wiring: it keeps the runnables that do not
// need leader election and drops the others.
func EveryReplicaWebhooks(mgr manager.Manager) manager.Manager {
	return runnablesNeedingLeadership{Manager: mgr, leader: false}
}

// LeaderWebhooks is a term's manager for Gardener's webhook wiring: it keeps the runnables that need leader election,
// the one-shot registration first and the others only once it has succeeded, and registers the handlers on server,
// which never starts.
func LeaderWebhooks(term manager.Manager, server webhook.Server) manager.Manager {
	return runnablesNeedingLeadership{Manager: term, leader: true, server: server, registrationFirst: &registrationFirst{done: make(chan struct{})}}
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

func (m runnablesNeedingLeadership) Add(r manager.Runnable) error {
	if NeedsLeaderElection(r) != m.leader {
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
