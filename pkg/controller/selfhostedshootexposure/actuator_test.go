// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package selfhostedshootexposure

import (
	"context"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	extensionscontroller "github.com/gardener/gardener/extensions/pkg/controller"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/exposure/health"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/scheme"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/fixtures"
)

// TestReconcileReadsTheStoredCluster: gardenlet updates the Cluster right before it asks for a reconciliation, and the
// generic reconciler passes the Cluster from its cache, which may not have that update yet. The actuator takes the
// providerConfig from the Cluster as stored: here one it refuses, while the cached one holds a valid one.
func TestReconcileReadsTheStoredCluster(t *testing.T) {
	stored := fixtures.WithExposureConfig(fixtures.Shoot(true), `{"apiVersion":"cilium-selfhosted.extensions.gardener.cloud/v1alpha1","kind":"ExposureConfig","announcement":"Pigeons"}`)
	cached := fixtures.WithExposureConfig(fixtures.Shoot(true), fixtures.ExposureConfigL2)
	c := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(fixtures.Cluster(stored)).Build()
	// A registry as the controller's, so that an actuator that went past the refusal would probe rather than panic.
	probes, err := health.NewRegistry(&rest.Config{}, health.PurposeEndpoints, health.Settings{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(probes.Stop)
	a := NewActuator(c, c, events.NewFakeRecorder(10), c, 0, probes).(*actuator)
	a.procNet = t.TempDir()
	exp := fixtures.Exposure(stored.Name, fixtures.Nodes())
	_, err = a.Reconcile(context.Background(), logr.Discard(), exp, &extensionscontroller.Cluster{Shoot: cached})
	if err == nil || !strings.Contains(err.Error(), "announcement") || !strings.Contains(err.Error(), "Pigeons") {
		t.Errorf("Reconcile with the stored Cluster's providerConfig: %v, want its announcement refused", err)
	}
}
