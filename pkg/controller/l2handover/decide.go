// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

// Package l2handover hands Cilium's L2 announcement lease of an exposure's VIP to this replica's own control-plane
// node when the node that holds it has lost its kube-apiserver, instead of waiting for the lease to expire, and takes
// a lease its holder released for this node when its agent's L2 responder answers, before a fresh agent takes it. What
// it relies on in client-go's leader election and Cilium's L2 announcer: docs/development/l2-handover.md.
package l2handover

import (
	"fmt"
	"time"

	"k8s.io/client-go/tools/leaderelection"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/exposure/health"
)

// Timings are the lease timings Cilium's agents run with (cilium-config l2-announcements-*).
type Timings struct {
	Duration, RenewDeadline, RetryPeriod time.Duration
}

// CiliumDefaultTimings are Cilium's defaults of the l2-announcements-* settings, for a cilium-config without them.
var CiliumDefaultTimings = Timings{Duration: 15 * time.Second, RenewDeadline: 5 * time.Second, RetryPeriod: 2 * time.Second}

const (
	// renewalMargin covers a renewal's own request and its watch event on top of two retry periods.
	renewalMargin = 250 * time.Millisecond
	// acknowledgeMargin covers the new holder's request and its watch event on top of its jittered retry, also on a
	// loaded node (docs/development/testing.md, Flakes: 500 ms was exceeded).
	acknowledgeMargin = time.Second
)

// UnrenewedAfter is how long a lease may go without a new resourceVersion before its holder counts as not renewing:
// a holder that reaches kube-apiserver renews every RetryPeriod.
func (t Timings) UnrenewedAfter() time.Duration { return 2*t.RetryPeriod + renewalMargin }

// AcknowledgeWithin is how long the node a lease was handed to may take to renew it: its agent's next jittered try.
func (t Timings) AcknowledgeWithin() time.Duration {
	return time.Duration((1+leaderelection.JitterFactor)*float64(t.RetryPeriod)) + acknowledgeMargin
}

// Facts are what one replica knows of one exposure's L2 announcement lease when it decides.
type Facts struct {
	// Self is this replica's node, Holder the lease's holder ("": none).
	Self, Holder string
	// Unrenewed is how long the lease's resourceVersion has stayed the same, as this replica saw it.
	Unrenewed time.Duration
	// Timings are the agents' lease timings.
	Timings Timings
	// HolderProbed says whether the holder is an endpoint of the exposure, whose kube-apiserver is probed;
	// HolderAPIServer is what the probes say of it.
	HolderProbed    bool
	HolderAPIServer health.State
	// SelfSelected: the exposure's L2 policy selects Self; SelfReady: Self's Node is Ready.
	SelfSelected, SelfReady bool
	// AgentReadyFor is how long Cilium's agent pod on Self has been Ready (it campaigns for the lease); 0: not Ready.
	AgentReadyFor time.Duration
	// AgentOutdated: the agent pod on Self comes from an older template of its DaemonSet than another agent pod (a
	// rollout is under way and will restart it).
	AgentOutdated bool
}

// AgentSettledAfter is how long Cilium's agent pod must have been Ready before a released lease is taken for its node:
// an agent reports Ready before its L2 responder answers (docs/development/l2-handover.md, "When an agent's L2
// responder answers").
const AgentSettledAfter = 10 * time.Second

// Decide says whether to hand the lease to Self now and why (or why not): when its holder failed, or when it was
// released (Holder "") so recently that the agents are still to try for it.
func Decide(f Facts) (bool, string) {
	if f.Holder == "" {
		return decideReleased(f)
	}
	if failed, why := HolderFailed(f); !failed {
		return false, why
	}
	if ok, why := eligible(f); !ok {
		return false, why
	}
	return true, fmt.Sprintf("the kube-apiserver of the holder %s is not ready (%s) and the lease was not renewed for %s", f.Holder, f.HolderAPIServer.Reason, f.Unrenewed.Round(time.Millisecond))
}

// decideReleased takes a lease that a stopping agent released for Self when its agent has settled, before a fresh agent
// takes it; after UnrenewedAfter every campaigning agent has tried, and a lease still empty is none of its business.
func decideReleased(f Facts) (bool, string) {
	if f.Unrenewed >= f.Timings.UnrenewedAfter() {
		return false, fmt.Sprintf("the lease has had no holder for %s: every campaigning agent has tried for it", f.Unrenewed.Round(time.Millisecond))
	}
	if ok, why := eligible(f); !ok {
		return false, why
	}
	switch {
	case f.AgentReadyFor < AgentSettledAfter:
		return false, fmt.Sprintf("the lease was released, but Cilium's agent on %s has been ready for only %s: its L2 responder may not answer yet", f.Self, f.AgentReadyFor.Round(time.Millisecond))
	case f.AgentOutdated:
		return false, fmt.Sprintf("the lease was released, but Cilium's agent on %s runs an older pod template than others: the rollout under way will restart it", f.Self)
	}
	return true, fmt.Sprintf("the lease was released %s ago and Cilium's agent on %s has been ready for %s", f.Unrenewed.Round(time.Millisecond), f.Self, f.AgentReadyFor.Round(time.Second))
}

// eligible says whether the lease may go to Self: the policy selects it, and it and its agent are ready.
func eligible(f Facts) (bool, string) {
	switch {
	case !f.SelfSelected:
		return false, fmt.Sprintf("the exposure's L2 policy does not select %s", f.Self)
	case !f.SelfReady:
		return false, fmt.Sprintf("node %s is not Ready", f.Self)
	case f.AgentReadyFor <= 0:
		return false, fmt.Sprintf("Cilium's agent on %s is not ready", f.Self)
	}
	return true, ""
}

// HolderFailed says whether another node holds the lease that neither renews it nor has a ready kube-apiserver, from
// the facts other than Self's own.
func HolderFailed(f Facts) (bool, string) {
	switch {
	case f.Holder == "":
		return false, "the lease has no holder: every campaigning agent takes it at its next try"
	case f.Holder == f.Self:
		return false, "this node holds the lease"
	case !f.HolderProbed:
		return false, fmt.Sprintf("the holder %s is no endpoint of the exposure, whose kube-apiserver the extension probes", f.Holder)
	case f.HolderAPIServer.Ready:
		return false, fmt.Sprintf("the kube-apiserver of the holder %s is ready: its agent can renew the lease", f.Holder)
	case f.Unrenewed < f.Timings.UnrenewedAfter():
		return false, fmt.Sprintf("the lease was renewed %s ago, within %s", f.Unrenewed.Round(time.Millisecond), f.Timings.UnrenewedAfter())
	}
	return true, ""
}
