// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package testenv

import (
	"context"
	"fmt"
	"maps"
	"time"

	"github.com/go-logr/logr"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gardencorev1beta1 "github.com/gardener/gardener/pkg/apis/core/v1beta1"
	v1beta1constants "github.com/gardener/gardener/pkg/apis/core/v1beta1/constants"
	extensionsv1alpha1 "github.com/gardener/gardener/pkg/apis/extensions/v1alpha1"
	"github.com/gardener/gardener/pkg/extensions"
	"github.com/gardener/gardener/pkg/utils/kubernetes/health"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/exposure/resources"
)

// RequestReconcile applies mutate to the exposure and asks for a reconciliation the way Gardener does, with its
// operation annotation.
func (e Exposures) RequestReconcile(ctx context.Context, exp *extensionsv1alpha1.SelfHostedShootExposure, mutate func(*extensionsv1alpha1.SelfHostedShootExposure)) error {
	if err := e.Client.Get(ctx, client.ObjectKeyFromObject(exp), exp); err != nil {
		return err
	}
	patch := client.MergeFrom(exp.DeepCopy())
	mutate(exp)
	if exp.Annotations == nil {
		exp.Annotations = map[string]string{}
	}
	exp.Annotations[v1beta1constants.GardenerOperation] = v1beta1constants.GardenerOperationReconcile
	return e.Client.Patch(ctx, exp, patch)
}

// WaitUntilReady waits until the exposure is ready as gardenadm sees it: Gardener's own wait for extension objects
// (extensions.WaitUntilExtensionObjectReady with health.CheckExtensionObject, which the selfhostedshootexposure
// component of gardenadm and gardenlet calls), that is reconciled at its generation, the operation annotation gone,
// no lastError and the last operation Succeeded. exp is kept up to date; on timeout the error says what was missing.
func WaitUntilReady(ctx context.Context, c client.Client, exp *extensionsv1alpha1.SelfHostedShootExposure, timeout time.Duration) error {
	return extensions.WaitUntilExtensionObjectReady(ctx, c, logr.Discard(), exp, extensionsv1alpha1.SelfHostedShootExposureResource,
		readyPollInterval, timeout, timeout, nil)
}

// ReconcileAndWait asks for a reconciliation (RequestReconcile) and waits until the exposure is ready from that very
// reconciliation: its last operation updated since the request as well. Gardener's operation annotation wrapper
// (pkg/controllerutils/reconciler/operation_annotation_wrapper.go) removes the annotation before the reconciliation
// writes Processing, so for a moment the object looks ready from the one before.
func (e Exposures) ReconcileAndWait(ctx context.Context, exp *extensionsv1alpha1.SelfHostedShootExposure, timeout time.Duration) error {
	if err := e.Client.Get(ctx, client.ObjectKeyFromObject(exp), exp); err != nil {
		return err
	}
	var before metav1.Time
	if op := exp.Status.LastOperation; op != nil {
		before = op.LastUpdateTime
	}
	// LastUpdateTime has whole seconds: a reconciliation that ends within the second of the one before could not be
	// told from it (ExtensionOperationHasBeenUpdatedSince wants a later time), so the request waits for the next one.
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Until(before.Add(time.Second))):
	}
	if err := e.Exposures().RequestReconcile(ctx, exp, func(*extensionsv1alpha1.SelfHostedShootExposure) {}); err != nil {
		return err
	}
	return extensions.WaitUntilObjectReadyWithHealthFunction(ctx, e.Client, logr.Discard(),
		health.And(health.CheckExtensionObject, health.ExtensionOperationHasBeenUpdatedSince(before)), exp,
		extensionsv1alpha1.SelfHostedShootExposureResource, readyPollInterval, timeout, timeout, nil)
}

// readyPollInterval is how often WaitUntilReady looks.
const readyPollInterval = 100 * time.Millisecond

// WaitForLastOperation waits until the exposure has been reconciled at its generation, its operation annotation is
// gone, and its last operation satisfies done. exp is kept up to date.
func (e Exposures) WaitForLastOperation(ctx context.Context, exp *extensionsv1alpha1.SelfHostedShootExposure, timeout time.Duration, done func(*gardencorev1beta1.LastOperation) bool) error {
	return WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		if err := e.Client.Get(ctx, client.ObjectKeyFromObject(exp), exp); err != nil {
			return false, err
		}
		op := exp.Status.LastOperation
		if op == nil || exp.Annotations[v1beta1constants.GardenerOperation] != "" || exp.Status.ObservedGeneration != exp.Generation {
			return false, nil
		}
		return done(op), fmt.Errorf("last operation %s: %s", op.State, op.Description)
	})
}

// WaitForPublished waits until the exposure's EndpointSlices publish exactly want: each endpoint address ready (and
// serving, which must agree) or not.
func (e Exposures) WaitForPublished(ctx context.Context, exp *extensionsv1alpha1.SelfHostedShootExposure, want map[string]bool, timeout time.Duration) error {
	var got map[string]bool
	err := WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		slices := &discoveryv1.EndpointSliceList{}
		if err := e.Client.List(ctx, slices, client.InNamespace(exp.Namespace), client.MatchingLabels(resources.Labels(exp.Name, exp.Namespace))); err != nil {
			return false, err
		}
		got = map[string]bool{}
		for _, s := range slices.Items {
			for _, ep := range s.Endpoints {
				if *ep.Conditions.Ready != *ep.Conditions.Serving {
					return false, fmt.Errorf("%s is published ready %v but serving %v", ep.Addresses[0], *ep.Conditions.Ready, *ep.Conditions.Serving)
				}
				got[ep.Addresses[0]] = *ep.Conditions.Ready
			}
		}
		return maps.Equal(got, want), nil
	})
	if err != nil {
		return fmt.Errorf("published %v, want %v: %w", got, want, err)
	}
	return nil
}
