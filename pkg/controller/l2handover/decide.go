// Package l2handover hands Cilium's L2 announcement lease of an exposure's VIP to this replica's own control-plane
// node when the node that holds it has lost its kube-apiserver, instead of waiting for the lease to expire.
//
// The announcing agent reaches kube-apiserver only through its own node's kube-apiserver (localhost:443, the
// webhook's pinning), so when that kube-apiserver stops, or the whole node dies, the agent can neither renew the lease
// nor learn that it lost it; the other agents take the lease only once it has expired (leaseDuration after the last
// renewal, plus their jittered retry). The extension's probes learn within a probe timeout that the holder's
// kube-apiserver does not answer, and the lease shows within two retry periods that nobody renews it.
//
// What the handover relies on, read in client-go's leader election (k8s.io/client-go/tools/leaderelection
// leaderelection.go, v0.35 and v0.36, which Cilium 1.19 and 1.20 vendor) and Cilium's L2 announcer
// (pkg/l2announcer/l2announcer.go, identity = the node name, ReleaseOnCancel true):
//   - An agent whose name a lease shows counts itself as the leader at its next try (tryAcquireOrRenew: the observed
//     holder is its identity, so it renews), which comes within (1 + JitterFactor) × RetryPeriod (acquire's
//     wait.JitterUntil). A restarted agent retakes a lease that names it the same way.
//   - An agent that holds a lease renews it every RetryPeriod; a lease whose resourceVersion has not changed for two
//     retry periods and a margin was not renewed by a holder that can reach kube-apiserver.
//   - The write is an Update on the resourceVersion that was read: it fails if the holder renewed in between.
//   - The old holder learns of the handover only once it reaches kube-apiserver again. If it was blind until its
//     RenewDeadline passed, its release (Get, then Update with an empty holder) can still clear the lease; the lease
//     then goes to whichever agent tries first, the new holder included, whose kube-apiserver is up (see
//     docs/operations.md).
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
	// acknowledgeMargin covers the new holder's request and its watch event on top of its jittered retry.
	acknowledgeMargin = 500 * time.Millisecond
)

// UnrenewedAfter is how long a lease may go without a new resourceVersion before its holder counts as not renewing:
// a holder that reaches kube-apiserver renews every RetryPeriod.
func (t Timings) UnrenewedAfter() time.Duration { return 2*t.RetryPeriod + renewalMargin }

// AcknowledgeWithin is how long the node a lease was handed to may take to renew it: its agent tries within
// (1 + JitterFactor) × RetryPeriod.
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
	// SelfSelected: the exposure's L2 policy selects Self; SelfReady: Self's Node is Ready; AgentReady: Cilium's agent
	// pod on Self is Ready (it campaigns for the lease).
	SelfSelected, SelfReady, AgentReady bool
}

// Decide says whether to hand the lease to Self now and why (or why not).
func Decide(f Facts) (bool, string) {
	if failed, why := HolderFailed(f); !failed {
		return false, why
	}
	switch {
	case !f.SelfSelected:
		return false, fmt.Sprintf("the exposure's L2 policy does not select %s", f.Self)
	case !f.SelfReady:
		return false, fmt.Sprintf("node %s is not Ready", f.Self)
	case !f.AgentReady:
		return false, fmt.Sprintf("Cilium's agent on %s is not ready", f.Self)
	}
	return true, fmt.Sprintf("the kube-apiserver of the holder %s is not ready (%s) and the lease was not renewed for %s", f.Holder, f.HolderAPIServer.Reason, f.Unrenewed.Round(time.Millisecond))
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
