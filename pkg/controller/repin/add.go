// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

// Package repin is the controller that recreates Cilium's pods whose way to kube-apiserver went stale: admitted with
// control-plane addresses that are no longer members (a node replaced at a new address, `gardenadm restore` onto new
// nodes, a DHCP lease that moved), or admitted while the webhook did not answer. kubelet writes a pod's hostAliases
// into its hosts file only when the pod starts, so only a new pod gets the current members.
package repin

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/gardener/gardener/pkg/utils/kubernetes/health"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/apiserverendpoints"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/cilium"
)

// ControllerName is the name of the controller and of its switch (--disable-controllers switches re-pinning off).
const ControllerName = "cilium-repin"

// DefaultAddOptions are the options of AddToManager.
var DefaultAddOptions = DefaultOptions

// AddToManager adds the controller to mgr.
func AddToManager(_ context.Context, mgr manager.Manager) error {
	toKey := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{Key}
	})
	return builder.ControllerManagedBy(mgr).
		Named(ControllerName).
		Watches(&corev1.Pod{}, toKey, builder.WithPredicates(ciliumPodChanged)).
		Watches(&corev1.Node{}, toKey, builder.WithPredicates(apiserverendpoints.MembershipChanged)).
		Complete(&Reconciler{
			Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder(ControllerName), Clock: clock.RealClock{}, Options: DefaultAddOptions,
		})
}

// ciliumPodChanged passes Cilium's pods coming, going, being scheduled or changing readiness (a batch waits for its
// replacements to be ready); their other status updates do not pass.
var ciliumPodChanged = predicate.And(
	predicate.NewPredicateFuncs(func(obj client.Object) bool {
		return obj.GetNamespace() == cilium.Namespace && cilium.IsWorkload(obj.GetLabels())
	}),
	predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		oldPod, okOld := e.ObjectOld.(*corev1.Pod)
		newPod, okNew := e.ObjectNew.(*corev1.Pod)
		return !okOld || !okNew || oldPod.Spec.NodeName != newPod.Spec.NodeName || health.IsPodReady(oldPod) != health.IsPodReady(newPod) ||
			(oldPod.DeletionTimestamp == nil) != (newPod.DeletionTimestamp == nil)
	}},
)
