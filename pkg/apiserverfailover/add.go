// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package apiserverfailover

import (
	"context"
	"fmt"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/apiserverendpoints"
)

// Name names the runnable in logs.
const Name = "apiserver-failover"

// AddToManager keeps d's control-plane addresses in step with the Nodes in mgr's cache, in every replica.
func AddToManager(mgr manager.Manager, d *Dialer) error {
	return mgr.Add(&updater{cache: mgr.GetCache(), dialer: d, log: mgr.GetLogger().WithName(Name)})
}

// updater sets the Dialer's addresses whenever a Node changes.
type updater struct {
	cache  cache.Cache
	dialer *Dialer
	log    logr.Logger
}

// NeedLeaderElection implements manager.LeaderElectionRunnable: every replica dials.
func (*updater) NeedLeaderElection() bool { return false }

// Start implements manager.Runnable.
func (u *updater) Start(ctx context.Context) error {
	informer, err := u.cache.GetInformer(ctx, &corev1.Node{})
	if err != nil {
		return fmt.Errorf("the Node informer: %w", err)
	}
	refresh := func() {
		nodes := &corev1.NodeList{}
		if err := u.cache.List(ctx, nodes); err != nil {
			u.log.Error(err, "Listing Nodes")
			return
		}
		u.dialer.SetControlPlane(apiserverendpoints.FromNodes(nodes.Items).Addresses)
	}
	registration, err := informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { refresh() },
		UpdateFunc: func(any, any) { refresh() },
		DeleteFunc: func(any) { refresh() },
	})
	if err != nil {
		return err
	}
	<-ctx.Done()
	return informer.RemoveEventHandler(registration)
}
