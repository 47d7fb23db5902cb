// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package l2handover

import (
	"fmt"
	"time"

	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	exposurehealth "github.com/gardener/gardener-extension-cilium-selfhosted/pkg/exposure/health"
)

// Name names the handover in logs, events and its switch.
const Name = "cilium-l2-handover"

// Options configure the handover.
type Options struct {
	// Enabled switches the handover on.
	Enabled bool
	// Node is the replica's node (the pod's spec.nodeName); without it the replica hands over to no node.
	Node string
	// Type is the exposure type the extension serves.
	Type string
	// Probes say how the holders' kube-apiservers are probed: a failure counts once FailureThreshold probes in a row
	// failed.
	Probes exposurehealth.Settings
}

// DefaultProbes probe the holder's kube-apiserver four times a second, each probe given until the next, and count it
// as failed at the first failure: a handover also needs the lease unrenewed for two retry periods, and the write
// fails if the holder renewed meanwhile.
var DefaultProbes = exposurehealth.Settings{Interval: 250 * time.Millisecond, Timeout: 250 * time.Millisecond, FailureThreshold: 1, SuccessThreshold: 1}

// AddToManager adds the handover to mgr as a runnable of every replica.
func AddToManager(mgr manager.Manager, o Options) error {
	log := mgr.GetLogger().WithName(Name)
	switch {
	case !o.Enabled:
		log.Info("Switched off: L2 announcement leases of failed announcers expire before another agent takes them")
		return nil
	case o.Node == "":
		log.Info("No node name (--node-name, the pod's spec.nodeName): this replica hands no lease to its node")
		return nil
	}
	probes, err := exposurehealth.NewRegistry(mgr.GetConfig(), exposurehealth.PurposeL2Handover, o.Probes, nil)
	if err != nil {
		return fmt.Errorf("the probes of the L2 handover: %w", err)
	}
	return mgr.Add(&Handover{
		Node: o.Node, Type: o.Type,
		Cache: mgr.GetClient(), Client: mgr.GetClient(), Reader: mgr.GetAPIReader(),
		Probes: probes, Recorder: mgr.GetEventRecorder(Name), Clock: clock.RealClock{}, Log: log,
	})
}
