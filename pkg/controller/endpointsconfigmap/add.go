// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

// Package endpointsconfigmap is the controller that keeps the endpoints ConfigMap, which Cilium's pod templates
// reference, current from the control-plane Nodes.
package endpointsconfigmap

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/apiserverendpoints"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/cilium"
)

// ControllerName is the name of the controller and of its switch (--disable-controllers).
const ControllerName = "cilium-apiserver-endpoints"

// configMapKey is the one object this controller reconciles; every event maps to it.
var configMapKey = client.ObjectKey{Namespace: cilium.Namespace, Name: apiserverendpoints.ConfigMapName}

// AddToManager adds the controller to mgr.
func AddToManager(_ context.Context, mgr manager.Manager) error {
	toConfigMap := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: configMapKey}}
	})
	return builder.ControllerManagedBy(mgr).
		Named(ControllerName).
		// Watching the ConfigMap restores it when someone edits or deletes it.
		Watches(&corev1.ConfigMap{}, toConfigMap, builder.WithPredicates(predicate.NewPredicateFuncs(func(obj client.Object) bool {
			return client.ObjectKeyFromObject(obj) == configMapKey
		}))).
		Watches(&corev1.Node{}, toConfigMap, builder.WithPredicates(apiserverendpoints.MembershipChanged)).
		Complete(&Reconciler{Client: mgr.GetClient()})
}
