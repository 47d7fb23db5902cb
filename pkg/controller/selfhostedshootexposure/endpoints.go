// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package selfhostedshootexposure

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/source"

	v1beta1helper "github.com/gardener/gardener/pkg/api/core/v1beta1/helper"
	gardencorev1beta1 "github.com/gardener/gardener/pkg/apis/core/v1beta1"
	extensionsv1alpha1 "github.com/gardener/gardener/pkg/apis/extensions/v1alpha1"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/exposure/health"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/identity"
)

// ConditionEndpointsReady says whether the kube-apiservers behind the exposure's endpoints are ready, and which are
// out.
const ConditionEndpointsReady gardencorev1beta1.ConditionType = "EndpointsReady"

// Reasons of ConditionEndpointsReady, also those of the events that accompany its changes.
const (
	reasonEndpointsReady    = "EndpointsReady"
	reasonEndpointsNotReady = "EndpointsNotReady"
	reasonProbesFailing     = "EndpointProbesFailing"
)

// reportEndpoints sets ConditionEndpointsReady from the endpoints' states and what is published, and records an event
// when it changes.
func (a *actuator) reportEndpoints(ctx context.Context, exp *extensionsv1alpha1.SelfHostedShootExposure, states map[string]health.State, notReady map[string]string, allFailing bool) error {
	addresses := slices.Sorted(maps.Keys(states))
	status, reason, eventType := gardencorev1beta1.ConditionTrue, reasonEndpointsReady, corev1.EventTypeNormal
	message := fmt.Sprintf("The kube-apiservers of all %d endpoints are ready.", len(addresses))
	switch {
	case allFailing && len(addresses) == 1:
		status, reason, eventType = gardencorev1beta1.ConditionFalse, reasonProbesFailing, corev1.EventTypeWarning
		message = fmt.Sprintf("The kube-apiserver of the only endpoint is not ready (%s); it stays published, as there is no other.", describe(addresses, states))
	case allFailing:
		status, reason, eventType = gardencorev1beta1.ConditionFalse, reasonProbesFailing, corev1.EventTypeWarning
		message = fmt.Sprintf("The probes of every endpoint fail, so all stay published (a VIP without a ready backend refuses every connection, "+
			"and the probing itself may be at fault: the extension's network or a changed certificate): %s.", describe(addresses, states))
	case len(notReady) > 0:
		out := slices.Sorted(maps.Keys(notReady))
		status, reason, eventType = gardencorev1beta1.ConditionFalse, reasonEndpointsNotReady, corev1.EventTypeWarning
		message = fmt.Sprintf("Not ready, published as not ready so that Cilium sends them no new connection: %s. Ready: %d of %d.",
			describe(out, states), len(addresses)-len(out), len(addresses))
	}

	previous := v1beta1helper.GetCondition(exp.Status.Conditions, ConditionEndpointsReady)
	if previous != nil && previous.Status == status && previous.Reason == reason && previous.Message == message {
		return nil
	}
	patch := client.MergeFrom(exp.DeepCopy())
	condition := v1beta1helper.GetOrInitConditionWithClock(clock.RealClock{}, exp.Status.Conditions, ConditionEndpointsReady)
	condition = v1beta1helper.UpdatedConditionWithClock(clock.RealClock{}, condition, status, reason, message)
	exp.Status.Conditions = v1beta1helper.MergeConditions(exp.Status.Conditions, condition)
	if err := a.client.Status().Patch(ctx, exp, patch); err != nil {
		return fmt.Errorf("reporting the endpoints' readiness: %w", err)
	}
	if previous != nil || status != gardencorev1beta1.ConditionTrue {
		a.recorder.Eventf(exp, nil, eventType, reason, "PublishEndpoints", "%s", identity.EventNote(message))
	}
	return nil
}

// describe lists addresses with what their probes say.
func describe(addresses []string, states map[string]health.State) string {
	parts := make([]string, 0, len(addresses))
	for _, addr := range addresses {
		if s := states[addr]; !s.Ready {
			reason := s.Reason
			if len(reason) > 200 {
				reason = reason[:200] + "..."
			}
			parts = append(parts, fmt.Sprintf("%s (%s)", addr, strings.TrimSpace(reason)))
		} else {
			parts = append(parts, addr+" (ready)")
		}
	}
	return strings.Join(parts, ", ")
}

// healthTriggerName names the controller that reacts to changes of the endpoints' readiness.
const healthTriggerName = ControllerName + "-health"

// addHealthTrigger asks for a reconciliation of every exposure whose endpoint changed between ready and not ready
// (changes carries them), the way Gardener does, with the operation annotation. A reconciliation in progress that read
// the old state is followed by another, as the generic reconciler removes the annotation before it starts.
func addHealthTrigger(mgr manager.Manager, changes <-chan event.GenericEvent) error {
	return builder.ControllerManagedBy(mgr).
		Named(healthTriggerName).
		WatchesRawSource(source.Channel(changes, &handler.EnqueueRequestForObject{})).
		Complete(&exposureTrigger{client: mgr.GetClient()})
}

// enqueue turns the exposures the registry reports into events for the health trigger. It gives up when the prober
// stops (at shutdown the trigger may no longer read).
func enqueue(changes chan<- event.GenericEvent) func(ctx context.Context, exposures []types.NamespacedName) {
	return func(ctx context.Context, exposures []types.NamespacedName) {
		for _, key := range exposures {
			select {
			case changes <- event.GenericEvent{Object: &extensionsv1alpha1.SelfHostedShootExposure{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}}:
			case <-ctx.Done():
				return
			}
		}
	}
}
