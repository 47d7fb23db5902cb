// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

// Package managedresourceretry is the controller that has Gardener's resource manager apply Cilium's ManagedResource
// again at once when the keep-pinned admission policies refused its last apply while the webhook did not answer.
package managedresourceretry

import (
	"context"

	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	resourcesv1alpha1 "github.com/gardener/gardener/pkg/apis/resources/v1alpha1"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/cilium"
)

// ControllerName is the name of the controller and of its switch (--disable-controllers).
const ControllerName = "cilium-managedresource-retry"

// AddToManager adds the controller to mgr. It runs in the leader, whose process serves the webhook by the time its
// controllers start: its first reconciliation is the request that follows the extension's return.
func AddToManager(_ context.Context, mgr manager.Manager) error {
	return builder.ControllerManagedBy(mgr).
		Named(ControllerName).
		For(&resourcesv1alpha1.ManagedResource{}, builder.WithPredicates(predicate.NewPredicateFuncs(func(obj client.Object) bool {
			return client.ObjectKeyFromObject(obj) == cilium.ManagedResource
		}))).
		Complete(&Reconciler{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder(ControllerName), Clock: clock.RealClock{}})
}
