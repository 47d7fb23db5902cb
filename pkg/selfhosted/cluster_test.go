// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package selfhosted_test

import (
	"context"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/scheme"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/selfhosted"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/fixtures"
)

func TestShootReader(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientBuilder().WithScheme(scheme.New()).Build()
	r := selfhosted.NewShootReader(c)

	if shoot, err := r.Shoot(ctx); err != nil || shoot != nil {
		t.Fatalf("no Cluster: got %v, %v", shoot, err)
	}
	cluster := fixtures.Cluster(fixtures.Shoot(false))
	if err := c.Create(ctx, cluster); err != nil {
		t.Fatal(err)
	}
	if shoot, err := r.Shoot(ctx); err != nil || shoot != nil {
		t.Fatalf("not self-hosted: got %v, %v", shoot, err)
	}
	// The decoded shoot follows the Cluster as it changes.
	cluster.Spec = fixtures.Cluster(fixtures.Shoot(true)).Spec
	if err := c.Update(ctx, cluster); err != nil {
		t.Fatal(err)
	}
	shoot, err := r.Shoot(ctx)
	if err != nil || shoot == nil || shoot.Name != "bare-metal" {
		t.Fatalf("self-hosted: got %v, %v", shoot, err)
	}
	if again, _ := r.Shoot(ctx); again != shoot {
		t.Error("an unchanged Cluster was decoded again")
	}
	if err := c.Delete(ctx, cluster); err != nil {
		t.Fatal(err)
	}
	if shoot, err := r.Shoot(ctx); err != nil || shoot != nil {
		t.Fatalf("Cluster deleted: got %v, %v", shoot, err)
	}
}
