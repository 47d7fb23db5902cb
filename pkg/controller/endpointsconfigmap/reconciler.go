// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package endpointsconfigmap

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/apiserverendpoints"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/identity"
)

// Reconciler writes the endpoints ConfigMap from the control-plane Nodes.
type Reconciler struct {
	Client client.Client
}

// Reconcile applies the ConfigMap with the InternalIPs of all control-plane nodes. When none is known (the Nodes are
// gone from the cache, or none has an InternalIP yet) it keeps what the ConfigMap says: an empty list would send
// every new Cilium pod off the control plane back to the ClusterIP.
func (r *Reconciler) Reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	nodes := &corev1.NodeList{}
	// Control-plane nodes are known by a label or a taint (apiserverendpoints.IsControlPlaneNode): no selector can ask
	// for either.
	if err := r.Client.List(ctx, nodes, client.UnsafeDisableDeepCopy); err != nil {
		return reconcile.Result{}, fmt.Errorf("listing nodes: %w", err)
	}
	controlPlane := apiserverendpoints.FromNodes(nodes.Items)
	if controlPlane.Empty() {
		logf.FromContext(ctx).Info("No control-plane node with an InternalIP, keeping the endpoints ConfigMap as it is")
		return reconcile.Result{}, nil
	}
	if err := r.Client.Apply(ctx, apiserverendpoints.ConfigMap(controlPlane),
		identity.FieldOwner, client.ForceOwnership); err != nil {
		return reconcile.Result{}, fmt.Errorf("applying ConfigMap %s: %w", configMapKey, err)
	}
	return reconcile.Result{}, nil
}
