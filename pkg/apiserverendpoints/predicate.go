// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package apiserverendpoints

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
)

// MembershipChanged passes the Node events that can change the control-plane members or the control-plane nodes: a
// control-plane node comes or goes, a node gains or loses the role (the label, or the taint of a joining node), a
// control-plane node's addresses or readiness change (Ready nodes come first). Status heartbeats do not pass.
var MembershipChanged = predicate.Funcs{
	CreateFunc: func(e event.CreateEvent) bool { return isControlPlane(e.Object) },
	DeleteFunc: func(e event.DeleteEvent) bool { return isControlPlane(e.Object) },
	UpdateFunc: func(e event.UpdateEvent) bool {
		if isControlPlane(e.ObjectOld) != isControlPlane(e.ObjectNew) || isMember(e.ObjectOld) != isMember(e.ObjectNew) {
			return true
		}
		oldNode, okOld := e.ObjectOld.(*corev1.Node)
		newNode, okNew := e.ObjectNew.(*corev1.Node)
		return okOld && okNew && isControlPlane(newNode) &&
			(!slices.Equal(oldNode.Status.Addresses, newNode.Status.Addresses) || ReadyChanged(oldNode, newNode))
	},
	GenericFunc: func(event.GenericEvent) bool { return false },
}

func isControlPlane(obj client.Object) bool {
	node, ok := obj.(*corev1.Node)
	return ok && IsControlPlaneNode(node)
}

func isMember(obj client.Object) bool {
	node, ok := obj.(*corev1.Node)
	return ok && IsMember(node)
}
