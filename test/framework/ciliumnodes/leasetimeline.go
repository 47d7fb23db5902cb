// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package ciliumnodes

import (
	"context"
	"fmt"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	extensionsv1alpha1 "github.com/gardener/gardener/pkg/apis/extensions/v1alpha1"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/controller/l2handover"
)

// LeaseVersion is one write of the L2 announcement lease, with the times its writer put in it (every writer runs on
// this machine's clock): an agent's renewal, an agent's acquisition or the extension's handover.
type LeaseVersion struct {
	Holder            string
	Acquired, Renewed time.Time
}

// timelineWait bounds how long stopping a lease timeline waits for the versions it is asked for: the watch delivers a
// write a moment after it is made.
const timelineWait = 5 * time.Second

// leaseTimeline watches the exposure's L2 announcement lease until the returned stop is called, which returns every
// version written meanwhile, once until holds of them (nil: at once) or timelineWait has passed. A watch, not polling,
// so that recording adds no load to the kube-apiserver the agents and the extension race on.
func (c *Cluster) leaseTimeline(ctx context.Context, exp *extensionsv1alpha1.SelfHostedShootExposure) (stop func(until func([]LeaseVersion) bool) []LeaseVersion, err error) {
	clientset, err := kubernetes.NewForConfig(c.env.Config)
	if err != nil {
		return nil, err
	}
	key := l2handover.LeaseKey(exp)
	ctx, cancel := context.WithCancel(ctx)
	w, err := clientset.CoordinationV1().Leases(key.Namespace).Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", key.Name).String()})
	if err != nil {
		cancel()
		return nil, fmt.Errorf("watching lease %s: %w", key, err)
	}
	var (
		mu       sync.Mutex
		versions []LeaseVersion
		done     = make(chan struct{})
	)
	go func() {
		defer close(done)
		for e := range w.ResultChan() {
			lease, ok := e.Object.(*coordinationv1.Lease)
			if !ok || (e.Type != watch.Added && e.Type != watch.Modified) {
				continue
			}
			v := LeaseVersion{Holder: ptr.Deref(lease.Spec.HolderIdentity, "")}
			if t := lease.Spec.AcquireTime; t != nil {
				v.Acquired = t.Time
			}
			if t := lease.Spec.RenewTime; t != nil {
				v.Renewed = t.Time
			}
			mu.Lock()
			versions = append(versions, v)
			mu.Unlock()
		}
	}()
	return func(until func([]LeaseVersion) bool) []LeaseVersion {
		if until != nil {
			_ = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timelineWait, true, func(context.Context) (bool, error) {
				mu.Lock()
				defer mu.Unlock()
				return until(versions), nil
			})
		}
		w.Stop()
		cancel()
		<-done
		mu.Lock()
		defer mu.Unlock()
		return versions
	}, nil
}

// LeaseMove is what the lease's writes say of a failover from one holder to another, as times since the death.
type LeaseMove struct {
	// LastRenewal is the old holder's last renewal (negative: before the death), Moved when the new holder's term
	// began (the handover's write, or the agent's acquisition of an expired lease), TakenUp the new holder's agent's
	// first renewal of a term it did not write itself (Moved when it acquired the lease).
	LastRenewal, Moved, TakenUp time.Duration
}

// moveOf reads the move from holder from to holder to out of the lease's versions since start; handedOver says the
// extension wrote the new term.
func moveOf(versions []LeaseVersion, from, to string, start time.Time, handedOver bool) LeaseMove {
	var m LeaseMove
	for _, v := range versions {
		switch {
		case v.Holder == from && v.Renewed.Before(start):
			m.LastRenewal = v.Renewed.Sub(start)
		case v.Holder != to || v.Acquired.Before(start):
		case m.Moved == 0:
			m.Moved = v.Acquired.Sub(start)
			if !handedOver {
				m.TakenUp = m.Moved
			}
		case m.TakenUp == 0 && v.Renewed.After(v.Acquired):
			m.TakenUp = v.Renewed.Sub(start)
		}
	}
	return m
}

func (m LeaseMove) String() string {
	return fmt.Sprintf("last renewed %s before, moved after %s, taken up after %s",
		(-m.LastRenewal).Round(time.Millisecond), m.Moved.Round(time.Millisecond), m.TakenUp.Round(time.Millisecond))
}
