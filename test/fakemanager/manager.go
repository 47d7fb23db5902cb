// Package fakemanager gives Gardener's webhook framework what it takes from a controller-runtime manager, a scheme and
// a client, without starting one: for tests and benchmarks of the webhooks' handlers.
package fakemanager

import (
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// Manager answers GetScheme and GetClient; every other method panics.
type Manager struct {
	manager.Manager
	Scheme *runtime.Scheme
	Client client.Client
}

// GetScheme returns the scheme.
func (m Manager) GetScheme() *runtime.Scheme { return m.Scheme }

// GetClient returns the client.
func (m Manager) GetClient() client.Client { return m.Client }
