// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package processmodel

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// TestRegistrationFirst: in a leader term, the certificate reconciler starts only once Gardener's one-shot registration
// has returned, never while it reads the webhook configuration they share; a registration that fails releases nothing,
// and a wiring that no longer adds its registration first is refused by name.
func TestRegistrationFirst(t *testing.T) {
	g := &registrationFirst{done: make(chan struct{})}
	if _, err := g.add(manager.RunnableFunc(func(context.Context) error { return nil })); err == nil || !strings.Contains(err.Error(), registrationType) {
		t.Errorf("a wiring that adds something else first: %v, want a refusal naming %s", err, registrationType)
	}

	for _, tc := range []struct {
		name         string
		registration error
		released     bool
	}{
		{"the registration succeeds", nil, true},
		{"the registration fails", errors.New("refused"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := &registrationFirst{done: make(chan struct{}), started: true}
			registering := make(chan struct{})
			registration := g.registration(manager.RunnableFunc(func(context.Context) error {
				<-registering
				return tc.registration
			}))
			reconciled := make(chan struct{})
			reconciler := g.after(manager.RunnableFunc(func(context.Context) error {
				close(reconciled)
				return nil
			}))
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			registered := make(chan error, 1)
			go func() { registered <- registration.Start(ctx) }()
			reconcilerDone := make(chan error, 1)
			go func() { reconcilerDone <- reconciler.Start(ctx) }()
			select {
			case <-reconciled:
				t.Fatal("the reconciler started while the registration ran")
			case <-time.After(100 * time.Millisecond):
			}
			close(registering)
			if err := <-registered; !errors.Is(err, tc.registration) {
				t.Errorf("the registration returned %v, want %v", err, tc.registration)
			}
			if !tc.released {
				cancel()
			}
			if err := <-reconcilerDone; err != nil {
				t.Errorf("the reconciler returned %v", err)
			}
			select {
			case <-reconciled:
				if !tc.released {
					t.Error("the reconciler started after a failed registration")
				}
			default:
				if tc.released {
					t.Error("the reconciler did not start after the registration")
				}
			}
			if !registration.(leaderRunnable).NeedLeaderElection() || !reconciler.(leaderRunnable).NeedLeaderElection() {
				t.Error("a wrapped runnable no longer runs only while leading")
			}
		})
	}
}
