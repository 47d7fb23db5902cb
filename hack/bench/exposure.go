// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1beta1constants "github.com/gardener/gardener/pkg/apis/core/v1beta1/constants"
	extensionsv1alpha1 "github.com/gardener/gardener/pkg/apis/extensions/v1alpha1"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/exposure/resources"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/testenv"
)

// exposureWithEndpoints is an L2 exposure pinned to vip with n control-plane endpoints.
func exposureWithEndpoints(name, vip string, n int) *extensionsv1alpha1.SelfHostedShootExposure {
	exp := &extensionsv1alpha1.SelfHostedShootExposure{}
	exp.Name, exp.Namespace = name, "kube-system"
	exp.Annotations = map[string]string{v1beta1constants.GardenerOperation: v1beta1constants.GardenerOperationReconcile}
	exp.Spec.Type, exp.Spec.Port = "cilium", 443
	exp.Spec.ProviderConfig = &runtime.RawExtension{Raw: []byte(`{"apiVersion":"cilium-selfhosted.extensions.gardener.cloud/v1alpha1",` +
		`"kind":"ExposureConfig","pool":{"cidrs":["` + vip + `/32"]},"loadBalancerIPs":["` + vip + `"]}`)}
	for i := range n {
		exp.Spec.Endpoints = append(exp.Spec.Endpoints, extensionsv1alpha1.ControlPlaneEndpoint{
			NodeName:  fmt.Sprintf("cp-%d", i),
			Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("10.%d.%d.%d", 100+i/65536, i/256%256, i%256)}},
		})
	}
	return exp
}

// exposureConvergence measures, with Cilium's real operator, the time from creating an exposure to Succeeded with the
// VIP in status, and for an endpoint change to reach the slices.
func exposureConvergence(ctx context.Context, r *report, env *testenv.Env) error {
	if err := firstExposures(ctx, r, env.Client); err != nil {
		return err
	}
	goals := map[int]time.Duration{1000: 2 * time.Second}
	for i, n := range []int{3, 100, 1000} {
		exp := exposureWithEndpoints(fmt.Sprintf("bench-%d", n), fmt.Sprintf("198.18.0.%d", i+1), n)
		took, err := createAndWait(ctx, env.Client, exp)
		if err != nil {
			return err
		}
		if n != 3 { // the 3-endpoint case is reported by firstExposures; this exposure is here for its endpoint change
			res := Result{Section: convergenceSection, Name: fmt.Sprintf("create -> Succeeded with VIP, %d endpoints", n), Value: ms(took), Unit: "ms"}
			if goal, ok := goals[n]; ok {
				res.Goal, res.Met = "< "+goal.String(), met(took < goal)
			}
			r.add(res)
		}
		if err := endpointChange(ctx, r, env.Client, exp); err != nil {
			return err
		}
	}
	return manyExposures(ctx, r, env.Client, 100)
}

const convergenceSection = "4. Exposure convergence with the real cilium-operator (L2, pinned VIP)"

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// createAndWait creates exp and says how long it took to be Succeeded.
func createAndWait(ctx context.Context, c client.Client, exp *extensionsv1alpha1.SelfHostedShootExposure) (time.Duration, error) {
	start := time.Now()
	if err := c.Create(ctx, exp); err != nil {
		return 0, err
	}
	if err := testenv.WaitUntilReady(ctx, c, exp, 2*time.Minute); err != nil {
		return 0, fmt.Errorf("exposure %s with %d endpoints: %w", exp.Name, len(exp.Spec.Endpoints), err)
	}
	return time.Since(start), nil
}

// firstExposures measures the first exposures of the run, of 3 endpoints each. The first is also the first pool LB-IPAM
// sees: it initialises only then. One sample says little on two shared cores, so the case is measured on several
// exposures, one after the other.
func firstExposures(ctx context.Context, r *report, c client.Client) error {
	const samples = 5
	var small []time.Duration
	for i := range samples {
		took, err := createAndWait(ctx, c, exposureWithEndpoints(fmt.Sprintf("bench-3-%d", i), fmt.Sprintf("198.18.0.%d", 10+i), 3))
		if err != nil {
			return err
		}
		small = append(small, took)
	}
	r.add(Result{Section: convergenceSection, Name: "create -> Succeeded with VIP, 3 endpoints, first exposure of the run (LB-IPAM starts on its first pool)",
		Value: ms(small[0]), Unit: "ms", Goal: "< 1s", Met: met(small[0] < time.Second)})
	rest := slices.Clone(small[1:])
	slices.Sort(rest)
	r.add(Result{Section: convergenceSection, Name: fmt.Sprintf("create -> Succeeded with VIP, 3 endpoints, median of the next %d", len(rest)),
		Value: ms(rest[len(rest)/2]), Unit: "ms", Goal: "< 1s", Met: met(rest[len(rest)/2] < time.Second)})
	r.add(Result{Section: convergenceSection, Name: fmt.Sprintf("create -> Succeeded with VIP, 3 endpoints, slowest of the next %d", len(rest)),
		Value: ms(rest[len(rest)-1]), Unit: "ms"})
	return nil
}

// endpointChange drops the last endpoint of exp, as gardenlet does when a control-plane node goes, and measures until
// the slices have it.
func endpointChange(ctx context.Context, r *report, c client.Client, exp *extensionsv1alpha1.SelfHostedShootExposure) error {
	n := len(exp.Spec.Endpoints)
	start := time.Now()
	patch := client.MergeFrom(exp.DeepCopy())
	exp.Spec.Endpoints = exp.Spec.Endpoints[:n-1]
	exp.Annotations = map[string]string{v1beta1constants.GardenerOperation: v1beta1constants.GardenerOperationReconcile}
	if err := c.Patch(ctx, exp, patch); err != nil {
		return err
	}
	if err := testenv.WaitFor(ctx, 2*time.Minute, func(ctx context.Context) (bool, error) {
		slices := &discoveryv1.EndpointSliceList{}
		if err := c.List(ctx, slices, client.MatchingLabels(resources.Labels(exp.Name, exp.Namespace))); err != nil {
			return false, err
		}
		count := 0
		for _, s := range slices.Items {
			count += len(s.Endpoints)
		}
		return count == n-1, nil
	}); err != nil {
		return err
	}
	r.add(Result{Section: convergenceSection, Name: fmt.Sprintf("endpoint change -> slices, %d endpoints", n), Value: ms(time.Since(start)), Unit: "ms"})
	return nil
}

// manyExposures creates many exposures of 3 endpoints at once and measures until all are Succeeded.
func manyExposures(ctx context.Context, r *report, c client.Client, many int) error {
	var exps []*extensionsv1alpha1.SelfHostedShootExposure
	start := time.Now()
	for i := range many {
		exp := exposureWithEndpoints(fmt.Sprintf("many-%d", i), fmt.Sprintf("198.18.1.%d", i+1), 3)
		if err := c.Create(ctx, exp); err != nil {
			return err
		}
		exps = append(exps, exp)
	}
	// One deadline for all: they converge together, each wait returns at once for one already ready.
	deadline := time.Now().Add(5 * time.Minute)
	for _, exp := range exps {
		if err := testenv.WaitUntilReady(ctx, c, exp, time.Until(deadline)); err != nil {
			return fmt.Errorf("%d exposures at once: %w", many, err)
		}
	}
	r.add(Result{Section: convergenceSection, Name: fmt.Sprintf("%d exposures created at once -> all Succeeded", many), Value: ms(time.Since(start)), Unit: "ms"})
	return nil
}
