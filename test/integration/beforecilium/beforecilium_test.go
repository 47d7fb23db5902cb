// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package beforecilium_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	gardencorev1beta1 "github.com/gardener/gardener/pkg/apis/core/v1beta1"
	extensionsv1alpha1 "github.com/gardener/gardener/pkg/apis/extensions/v1alpha1"

	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/ciliumchart"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/fixtures"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/testenv"
)

const ciliumVersion = "1.19.7"

// TestExposureOnceCiliumIsInstalled: without Cilium's CRDs the extension keeps running and admits Cilium's
// cilium-config; an exposure fails naming the missing kind; once the CRDs are installed the extension starts its
// informers on its own and the exposure succeeds.
func TestExposureOnceCiliumIsInstalled(t *testing.T) {
	ctx := context.Background()
	rendered, err := ciliumchart.Render(ciliumVersion, ciliumchart.Values(ciliumVersion))
	if err != nil {
		t.Fatal(err)
	}
	cm := rendered.Config.DeepCopy()
	if err := env.Client.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	if cm.Data["enable-lb-ipam"] != "true" {
		t.Errorf("cilium-config admitted without the webhook: enable-lb-ipam = %q", cm.Data["enable-lb-ipam"])
	}

	exp := fixtures.Exposure("bare-metal", fixtures.Nodes())
	if err := env.Client.Create(ctx, exp); err != nil {
		t.Fatal(err)
	}
	waitFor(t, exp, func(op *gardencorev1beta1.LastOperation) bool {
		return op.State == gardencorev1beta1.LastOperationStateError && strings.Contains(op.Description, "CiliumLoadBalancerIPPool")
	})
	select {
	case <-env.Extension.Stopped():
		t.Fatalf("the extension stopped without Cilium's CRDs: %v", env.Extension.Err())
	default:
	}

	if err := env.InstallCiliumCRDs(); err != nil {
		t.Fatal(err)
	}
	// The informers start once their kinds are served, without a restart.
	if err := testenv.WaitFor(ctx, time.Minute, func(context.Context) (bool, error) {
		if log := env.Extension.Log(); !strings.Contains(log, "Informers of the exposure's kinds synced") {
			return false, fmt.Errorf("informers not synced yet")
		}
		return true, nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := env.Exposures().RequestReconcile(ctx, exp, func(*extensionsv1alpha1.SelfHostedShootExposure) {}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, exp, func(op *gardencorev1beta1.LastOperation) bool {
		return op.State == gardencorev1beta1.LastOperationStateSucceeded
	})
	if len(exp.Status.Ingress) != 1 || exp.Status.Ingress[0].IP != fixtures.ExposureVIP {
		t.Errorf("status.ingress %+v, want %s", exp.Status.Ingress, fixtures.ExposureVIP)
	}
	counts, err := env.Owned(ctx, exp.Namespace, exp.Name)
	if err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{"Service", "EndpointSlice", "CiliumLoadBalancerIPPool", "CiliumL2AnnouncementPolicy"} {
		if counts[kind] != 1 {
			t.Errorf("%d %s, want 1 (all: %v)", counts[kind], kind, counts)
		}
	}
}

// waitFor waits until the exposure's last operation, for its current generation, satisfies done.
func waitFor(t *testing.T, exp *extensionsv1alpha1.SelfHostedShootExposure, done func(*gardencorev1beta1.LastOperation) bool) {
	t.Helper()
	if err := env.Exposures().WaitForLastOperation(context.Background(), exp, time.Minute, done); err != nil {
		t.Fatalf("exposure %s: %v", exp.Name, err)
	}
}
