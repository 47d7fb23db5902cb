// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package l2handover

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	ciliumv2alpha1 "github.com/cilium/cilium/pkg/k8s/apis/cilium.io/v2alpha1"
	slimv1 "github.com/cilium/cilium/pkg/k8s/slim/k8s/apis/meta/v1"
	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	extensionsv1beta1 "k8s.io/api/extensions/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	extensionsv1alpha1 "github.com/gardener/gardener/pkg/apis/extensions/v1alpha1"
	"github.com/gardener/gardener/pkg/utils/kubernetes/health"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/apiserverendpoints"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/cilium"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/exposure/ciliumconfig"
	exposurehealth "github.com/gardener/gardener-extension-cilium-selfhosted/pkg/exposure/health"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/exposure/resources"
)

// Event reasons on the exposure.
const (
	EventHandedOver     = "HandedOver"
	EventHandoverUndone = "HandoverUndone"
)

const (
	// tick is how often the leases are looked at: it adds at most that to a handover.
	tick = 50 * time.Millisecond
	// TimingsMaxAge is how long the timings read from cilium-config are used before they are read again: a change of
	// cilium-config reaches the handover within it.
	TimingsMaxAge = 30 * time.Second
	// requestTimeout bounds one request to kube-apiserver: a step waits for it.
	requestTimeout = 2 * time.Second
)

// Handover runs in every replica, leader or not (a replica on the dying node may well be the leader), and hands the
// leases only to its own node, through its own node's kube-apiserver, as that node's agent reaches it.
type Handover struct {
	// Node is this replica's node.
	Node string
	// Type is the exposure type the extension serves.
	Type string
	// Cache reads the exposures, leases, slices, nodes and Cilium's pods as informers hold them; Client writes the
	// lease; Reader reads cilium-config and the L2 policies from kube-apiserver.
	Cache  client.Reader
	Client client.Writer
	Reader client.Reader
	// Probes probe the holders' kube-apiservers.
	Probes   Probes
	Recorder events.EventRecorder
	Clock    clock.PassiveClock
	Log      logr.Logger

	mu sync.Mutex
	// seen is, by lease, the resourceVersion last seen and when it was first seen.
	seen map[types.NamespacedName]sighting
	// handed are the leases this replica handed to its node, until its agent renews them or the handover is undone;
	// undone when it last undid a handover of each, after which it takes no released lease for a lease duration.
	handed map[types.NamespacedName]handing
	undone map[types.NamespacedName]time.Time
	// suspected and declined are, by lease, what this replica last logged of a holder that looks failed and why it
	// did not hand the lease over: each new one is logged once.
	suspected, declined map[types.NamespacedName]string
	timings             Timings
	readAt              time.Time
}

// Probes are what the handover needs of an exposurehealth.Registry.
type Probes interface {
	Track(key types.NamespacedName, addresses []string)
	Untrack(key types.NamespacedName)
	State(address string) exposurehealth.State
	Stop()
}

type sighting struct {
	resourceVersion string
	at              time.Time
}

type handing struct {
	exposure        *extensionsv1alpha1.SelfHostedShootExposure
	from            string
	resourceVersion string
	at, deadline    time.Time
}

// NeedLeaderElection implements manager.LeaderElectionRunnable: every replica hands over to its own node.
func (*Handover) NeedLeaderElection() bool { return false }

// Start implements manager.Runnable.
func (h *Handover) Start(ctx context.Context) error {
	h.Log.Info("Handing the L2 announcement leases of failed announcers to this node", "node", h.Node)
	wait.UntilWithContext(ctx, h.step, tick)
	h.Probes.Stop()
	return nil
}

// step looks at the lease of every exposure of the extension's type.
func (h *Handover) step(ctx context.Context) {
	list := &extensionsv1alpha1.SelfHostedShootExposureList{}
	if err := h.Cache.List(ctx, list); err != nil {
		h.Log.V(1).Info("Listing exposures failed", "error", err.Error())
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.seen == nil {
		h.seen, h.handed, h.undone = map[types.NamespacedName]sighting{}, map[types.NamespacedName]handing{}, map[types.NamespacedName]time.Time{}
		h.suspected, h.declined = map[types.NamespacedName]string{}, map[types.NamespacedName]string{}
	}
	now := h.Clock.Now()
	live := map[types.NamespacedName]bool{}
	for i := range list.Items {
		exp := &list.Items[i]
		if exp.Spec.Type != h.Type || exp.DeletionTimestamp != nil {
			continue
		}
		key := LeaseKey(exp)
		live[key] = true
		if err := h.look(ctx, exp, key, now); err != nil {
			h.Log.V(1).Info("Looking at the L2 announcement lease failed", "lease", key, "error", err.Error())
		}
	}
	for key := range h.seen {
		if !live[key] {
			delete(h.seen, key)
			delete(h.handed, key)
			delete(h.undone, key)
			delete(h.suspected, key)
			delete(h.declined, key)
			h.Probes.Untrack(key)
		}
	}
}

// LeaseKey is Cilium's L2 announcement lease of the exposure's Service.
func LeaseKey(exp *extensionsv1alpha1.SelfHostedShootExposure) types.NamespacedName {
	return types.NamespacedName{Namespace: cilium.Namespace, Name: cilium.L2AnnouncementLeaseName(exp.Namespace, resources.ServiceName(exp.Name))}
}

func (h *Handover) look(ctx context.Context, exp *extensionsv1alpha1.SelfHostedShootExposure, key types.NamespacedName, now time.Time) error {
	lease := &coordinationv1.Lease{}
	if err := h.Cache.Get(ctx, key, lease); err != nil {
		// No lease: BGP, or no agent campaigned yet.
		h.Probes.Untrack(key)
		return client.IgnoreNotFound(err)
	}
	if s, ok := h.seen[key]; !ok || s.resourceVersion != lease.ResourceVersion {
		h.seen[key] = sighting{resourceVersion: lease.ResourceVersion, at: now}
	}
	unrenewed := now.Sub(h.seen[key].at)
	holder := ptr.Deref(lease.Spec.HolderIdentity, "")
	if handed, ok := h.handed[key]; ok {
		return h.acknowledge(ctx, key, lease, handed, now)
	}
	if holder == h.Node {
		h.Probes.Untrack(key)
		h.note(h.suspected, key, "", "")
		h.note(h.declined, key, "", "")
		return nil
	}
	timings, err := h.leaseTimings(ctx, now)
	if err != nil {
		return err
	}
	facts := Facts{Self: h.Node, Holder: holder, Unrenewed: unrenewed, Timings: timings}
	// This node's own state is read only once the lease is the handover's business: it takes a read from
	// kube-apiserver.
	if holder == "" {
		h.Probes.Untrack(key)
		if unrenewed >= timings.UnrenewedAfter() || now.Sub(h.undone[key]) < timings.Duration {
			return nil
		}
	} else {
		address, err := h.endpointOf(ctx, exp, holder)
		if err != nil {
			return err
		}
		if address == "" {
			h.Probes.Untrack(key)
		} else {
			h.Probes.Track(key, []string{address})
			facts.HolderProbed, facts.HolderAPIServer = true, h.Probes.State(address)
		}
		if !facts.HolderProbed || !facts.HolderAPIServer.Ready {
			h.note(h.suspected, key, fmt.Sprintf("%s %t", holder, facts.HolderProbed), "The L2 announcement lease's holder may have failed",
				"lease", key, "holder", holder, "probed", facts.HolderProbed, "reason", facts.HolderAPIServer.Reason)
		} else {
			h.note(h.suspected, key, "", "")
			h.note(h.declined, key, "", "")
		}
		if failed, _ := HolderFailed(facts); !failed {
			return nil
		}
	}
	if facts.SelfSelected, facts.SelfReady, facts.AgentReadyFor, facts.AgentOutdated, err = h.candidate(ctx, exp, now); err != nil {
		return err
	}
	ok, why := Decide(facts)
	if !ok {
		if holder != "" {
			// The reasons for a failed holder's lease name no durations: each is logged once.
			h.note(h.declined, key, holder+": "+why, "Not handing the L2 announcement lease of a failed holder to this node", "lease", key, "holder", holder, "reason", why)
		} else {
			h.Log.V(1).Info("Not handing the L2 announcement lease over", "lease", key, "reason", why)
		}
		return nil
	}
	return h.handOver(ctx, exp, key, lease, timings, why, now)
}

// handOver writes this node as the holder, on the resourceVersion read.
func (h *Handover) handOver(ctx context.Context, exp *extensionsv1alpha1.SelfHostedShootExposure, key types.NamespacedName, lease *coordinationv1.Lease, timings Timings, why string, now time.Time) error {
	from := ptr.Deref(lease.Spec.HolderIdentity, "")
	updated := lease.DeepCopy()
	at := metav1.NewMicroTime(now)
	updated.Spec.HolderIdentity = ptr.To(h.Node)
	updated.Spec.AcquireTime, updated.Spec.RenewTime = &at, &at
	updated.Spec.LeaseTransitions = ptr.To(ptr.Deref(lease.Spec.LeaseTransitions, 0) + 1)
	if from == "" {
		// A release leaves a duration of 1 s, after which every agent would take the lease before this node's renews.
		updated.Spec.LeaseDurationSeconds = ptr.To(releasedLeaseSeconds(timings))
	}
	if err := h.write(ctx, updated); err != nil {
		if apierrors.IsConflict(err) {
			// Renewed after all, or another replica handed it to its node first.
			countHandover(resultConflict)
			return nil
		}
		return fmt.Errorf("handing lease %s to %s: %w", key, h.Node, err)
	}
	h.handed[key] = handing{exposure: exp, from: from, resourceVersion: updated.ResourceVersion, at: now, deadline: now.Add(timings.AcknowledgeWithin())}
	h.seen[key] = sighting{resourceVersion: updated.ResourceVersion, at: now}
	countHandover(resultHandedOver)
	h.Log.Info("Handed the L2 announcement lease to this node", "lease", key, "from", from, "to", h.Node, "reason", why)
	if from == "" {
		from = "nobody (released)"
	}
	// The lease as written is the related object: its resourceVersion keeps each handover an event of its own (client-go
	// tools/events folds events of the same objects, reason and action into one series).
	h.Recorder.Eventf(exp, updated, corev1.EventTypeNormal, EventHandedOver, "HandOver", "Handed the L2 announcement of the VIP from %s to %s: %s", from, h.Node, why)
	return nil
}

// maxReleasedLeaseSeconds bounds the duration a released lease is taken for: Cilium's default lease duration, which the
// extension's admission policy (confine-lease-writes) allows when the holder was empty.
const maxReleasedLeaseSeconds = 15

// releasedLeaseSeconds is the duration a released lease is taken for: the agents' own, at most
// maxReleasedLeaseSeconds. The agent renews with its own at its next try.
func releasedLeaseSeconds(t Timings) int32 {
	return int32(min(max(math.Ceil(t.Duration.Seconds()), 1), maxReleasedLeaseSeconds))
}

// acknowledge waits for this node's agent to renew a lease handed to it, and undoes the handover when it does not in
// time: the agent may not campaign after all (no matching interface does not stop it campaigning, but a stuck agent
// or one without L2 announcements does). An empty holder lets every campaigning agent take the lease at its next try.
func (h *Handover) acknowledge(ctx context.Context, key types.NamespacedName, lease *coordinationv1.Lease, handed handing, now time.Time) error {
	holder := ptr.Deref(lease.Spec.HolderIdentity, "")
	switch {
	case lease.ResourceVersion != handed.resourceVersion && holder == h.Node:
		delete(h.handed, key)
		countHandover(resultAcknowledged)
		acknowledgeSeconds.Observe(now.Sub(handed.at).Seconds())
		h.Log.Info("This node's agent renewed the L2 announcement lease handed to it", "lease", key, "after", now.Sub(handed.at).Round(time.Millisecond))
		return nil
	case lease.ResourceVersion != handed.resourceVersion:
		delete(h.handed, key)
		h.Log.Info("The L2 announcement lease changed before this node's agent renewed it", "lease", key, "holder", holder)
		return nil
	case now.Before(handed.deadline):
		return nil
	}
	undone := lease.DeepCopy()
	at := metav1.NewMicroTime(now)
	undone.Spec.HolderIdentity = ptr.To("")
	undone.Spec.LeaseDurationSeconds = ptr.To[int32](1)
	undone.Spec.AcquireTime, undone.Spec.RenewTime = &at, &at
	if err := h.write(ctx, undone); err != nil {
		if apierrors.IsConflict(err) {
			return nil // the lease changed: the next step sees how
		}
		return fmt.Errorf("undoing the handover of lease %s: %w", key, err)
	}
	delete(h.handed, key)
	h.undone[key] = now
	countHandover(resultUndone)
	h.Log.Info("This node's agent did not renew the L2 announcement lease handed to it; cleared it for every agent", "lease", key, "within", handed.deadline.Sub(handed.at))
	h.Recorder.Eventf(handed.exposure, undone, corev1.EventTypeWarning, EventHandoverUndone, "ClearLease",
		"Cilium's agent on %s did not renew the L2 announcement lease within %s of the handover from %s; the lease is cleared, and the next agent to try takes it",
		h.Node, handed.deadline.Sub(handed.at), handed.from)
	return nil
}

// note logs msg with keysAndValues unless what was the last of notes on key; what "" forgets the last one.
func (h *Handover) note(notes map[types.NamespacedName]string, key types.NamespacedName, what, msg string, keysAndValues ...any) {
	if notes[key] == what {
		return
	}
	notes[key] = what
	if what != "" {
		h.Log.Info(msg, keysAndValues...)
	}
}

func (h *Handover) write(ctx context.Context, lease *coordinationv1.Lease) error {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	return h.Client.Update(ctx, lease)
}

// endpointOf is the address (IP:port) of node's endpoint in the exposure's EndpointSlices, "" when it has none.
func (h *Handover) endpointOf(ctx context.Context, exp *extensionsv1alpha1.SelfHostedShootExposure, node string) (string, error) {
	slices := &discoveryv1.EndpointSliceList{}
	if err := h.Cache.List(ctx, slices, client.InNamespace(exp.Namespace), client.MatchingLabels{discoveryv1.LabelServiceName: resources.ServiceName(exp.Name)}); err != nil {
		return "", err
	}
	for _, s := range slices.Items {
		var port int32
		for _, p := range s.Ports {
			if ptr.Deref(p.Name, "") == resources.PortName && p.Port != nil {
				port = *p.Port
			}
		}
		for _, e := range s.Endpoints {
			if ptr.Deref(e.NodeName, "") == node && len(e.Addresses) > 0 && port != 0 {
				return resources.EndpointAddress(e.Addresses[0], port), nil
			}
		}
	}
	return "", nil
}

// candidate says whether the exposure's L2 policy selects this node and the node is Ready, how long Cilium's agent on
// it has been Ready (0: it is not), and whether its pod comes from an older template than another agent pod.
func (h *Handover) candidate(ctx context.Context, exp *extensionsv1alpha1.SelfHostedShootExposure, now time.Time) (selected, ready bool, agentReadyFor time.Duration, agentOutdated bool, err error) {
	node := &corev1.Node{}
	if err := h.Cache.Get(ctx, client.ObjectKey{Name: h.Node}, node); err != nil {
		return false, false, 0, false, fmt.Errorf("reading this node %s: %w", h.Node, err)
	}
	policy := &ciliumv2alpha1.CiliumL2AnnouncementPolicy{}
	readCtx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	if err := h.Reader.Get(readCtx, client.ObjectKey{Name: resources.ClusterScopedName(exp.Namespace, exp.Name)}, policy); err != nil {
		return false, false, 0, false, fmt.Errorf("reading the exposure's L2 policy: %w", err)
	}
	selector, err := slimv1.LabelSelectorAsSelector(policy.Spec.NodeSelector)
	if err != nil {
		return false, false, 0, false, err
	}
	pods := &corev1.PodList{}
	if err := h.Cache.List(ctx, pods, client.InNamespace(cilium.Namespace), client.MatchingLabels{cilium.LabelKeyApp: cilium.LabelValueAgent}); err != nil {
		return false, false, 0, false, err
	}
	var own, newest int64
	for i := range pods.Items {
		p := &pods.Items[i]
		generation := templateGeneration(p)
		newest = max(newest, generation)
		if p.Spec.NodeName == h.Node && p.DeletionTimestamp == nil {
			agentReadyFor, own = max(agentReadyFor, readyFor(p, now)), max(own, generation)
		}
	}
	return selector.Matches(labels.Set(node.Labels)), apiserverendpoints.IsReady(node), agentReadyFor, own < newest, nil
}

// templateGeneration is the generation of its DaemonSet's template that a pod was made from: the label Kubernetes'
// DaemonSet controller sets (pkg/controller/daemon/util CreatePodTemplate), 0 without one.
func templateGeneration(pod *corev1.Pod) int64 {
	generation, _ := strconv.ParseInt(pod.Labels[extensionsv1beta1.DaemonSetTemplateGenerationKey], 10, 64)
	return generation
}

// readyFor is how long pod has been Ready at now, 0 when it is not; at least a nanosecond when it is.
func readyFor(pod *corev1.Pod, now time.Time) time.Duration {
	if !health.IsPodReady(pod) {
		return 0
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return max(now.Sub(c.LastTransitionTime.Time), time.Nanosecond)
		}
	}
	return time.Nanosecond
}

// leaseTimings are the agents' lease timings from cilium-config, read at most every TimingsMaxAge.
func (h *Handover) leaseTimings(ctx context.Context, now time.Time) (Timings, error) {
	if !h.readAt.IsZero() && now.Sub(h.readAt) < TimingsMaxAge {
		return h.timings, nil
	}
	cm := &corev1.ConfigMap{}
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	if err := h.Reader.Get(ctx, client.ObjectKey{Namespace: cilium.Namespace, Name: cilium.ConfigMapName}, cm); err != nil {
		return Timings{}, fmt.Errorf("reading %s: %w", cilium.ConfigMapName, err)
	}
	t, err := TimingsOf(cm.Data)
	if err != nil {
		return Timings{}, err
	}
	h.timings, h.readAt = t, now
	return t, nil
}

// TimingsOf are the lease timings of cilium-config's data, Cilium's defaults where it has none.
func TimingsOf(data map[string]string) (Timings, error) {
	t := CiliumDefaultTimings
	for _, s := range []struct {
		key string
		to  *time.Duration
	}{
		{ciliumconfig.KeyL2LeaseDuration, &t.Duration},
		{ciliumconfig.KeyL2LeaseRenewDeadline, &t.RenewDeadline},
		{ciliumconfig.KeyL2LeaseRetryPeriod, &t.RetryPeriod},
	} {
		v := strings.TrimSpace(data[s.key])
		if v == "" {
			continue
		}
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return Timings{}, fmt.Errorf("%s %s: %q is no positive duration", cilium.ConfigMapName, s.key, v)
		}
		*s.to = d
	}
	return t, nil
}
