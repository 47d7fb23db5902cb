// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package repin

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/gardener/gardener/pkg/utils/kubernetes/health"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/apiserverendpoints"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/cilium"
)

// Options bound how fast stale pods are recreated.
type Options struct {
	// BatchSize is how many stranded pods are deleted at once: what kube-apiserver has to absorb at a time, as each
	// starting agent lists and watches much of the cluster.
	BatchSize int
	// BatchTimeout is how long a batch's replacements may take to be ready before the next batch goes anyway.
	BatchTimeout time.Duration
	// SlowInterval is the least time between two recreations of degraded or unpinned pods, which still reach
	// kube-apiserver.
	SlowInterval time.Duration
	// ProbeRetry is how long after a dry run came back stale the owner is probed again: the webhook replica
	// kube-apiserver calls may lag this leader's view for a moment (docs/apiserver-access.md, "Re-pinning").
	ProbeRetry time.Duration
}

// DefaultOptions bring a thousand stranded agents back in twenty batches (docs/apiserver-access.md, "Re-pinning").
var DefaultOptions = Options{BatchSize: 50, BatchTimeout: 2 * time.Minute, SlowInterval: time.Minute, ProbeRetry: 5 * time.Second}

// Reconciler recreates Cilium's pods whose pinning is stale (Classify) by deleting them for their DaemonSet or ReplicaSet
// to replace, which the webhook pins to the current members; only after a dry-run create came back so pinned, stranded
// pods first in batches, the others one at a time (docs/apiserver-access.md, "Re-pinning").
type Reconciler struct {
	Client   client.Client
	Recorder events.EventRecorder
	Clock    clock.Clock
	Options  Options

	mu          sync.Mutex
	lastDeleted time.Time
	lastSlowAt  time.Time
	failedProbe map[types.UID]time.Time
}

func (r *Reconciler) lastBatchTime() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lastDeleted
}
func (r *Reconciler) setLastBatch(t time.Time) { r.mu.Lock(); defer r.mu.Unlock(); r.lastDeleted = t }
func (r *Reconciler) lastSlow() time.Time      { r.mu.Lock(); defer r.mu.Unlock(); return r.lastSlowAt }
func (r *Reconciler) setLastSlow(t time.Time)  { r.mu.Lock(); defer r.mu.Unlock(); r.lastSlowAt = t }

func (r *Reconciler) probeFailed(owner types.UID) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failedProbe[owner]
}

func (r *Reconciler) setProbeFailed(owner types.UID, t time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.failedProbe == nil {
		r.failedProbe = map[types.UID]time.Time{}
	}
	r.failedProbe[owner] = t
}

// Key is the one request of this controller: every event asks for a look at all Cilium pods.
var Key = reconcile.Request{NamespacedName: client.ObjectKey{Namespace: cilium.Namespace, Name: "cilium-pods"}}

// Reconcile implements reconcile.Reconciler.
func (r *Reconciler) Reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	log := logf.FromContext(ctx)
	nodes := &corev1.NodeList{}
	if err := r.Client.List(ctx, nodes); err != nil {
		return reconcile.Result{}, err
	}
	members := apiserverendpoints.FromNodes(nodes.Items)
	if members.Empty() {
		return reconcile.Result{}, nil // nothing to pin to: never act on an empty view
	}
	controlPlaneNodes, readyNodes := apiserverendpoints.ControlPlaneNodes(nodes.Items), sets.New[string]()
	for i := range nodes.Items {
		if apiserverendpoints.IsReady(&nodes.Items[i]) {
			readyNodes.Insert(nodes.Items[i].Name)
		}
	}
	pods, err := r.ciliumPods(ctx)
	if err != nil {
		return reconcile.Result{}, err
	}
	byPinning := map[Pinning][]*corev1.Pod{}
	for _, pod := range pods {
		p := Classify(pod, members, controlPlaneNodes)
		byPinning[p] = append(byPinning[p], pod)
	}
	observe(byPinning)

	if wait := r.inFlight(byPinning[Current], readyNodes); wait > 0 {
		return reconcile.Result{RequeueAfter: wait}, nil
	}
	// Only pods that a DaemonSet or ReplicaSet recreates; NotReady ones first.
	stranded := slices.DeleteFunc(slices.Clone(byPinning[Stranded]), orphan)
	slices.SortStableFunc(stranded, compareReadiness)
	stranded = stranded[:min(len(stranded), r.Options.BatchSize)]
	var slow []*corev1.Pod
	slowWait := r.Options.SlowInterval - r.Clock.Since(r.lastSlow())
	if others := slices.DeleteFunc(slices.Concat(byPinning[Degraded], byPinning[Unpinned], byPinning[Misplaced]), orphan); len(others) > 0 && slowWait <= 0 {
		slow = others[:1]
	}
	candidates := r.admitted(ctx, slices.Concat(stranded, slow), members, controlPlaneNodes)
	if len(candidates) == 0 {
		if len(pods) > len(byPinning[Current]) {
			return reconcile.Result{RequeueAfter: max(slowWait, time.Second)}, nil
		}
		return reconcile.Result{}, nil
	}
	for _, pod := range candidates {
		pinning := Classify(pod, members, controlPlaneNodes)
		if pinning != Stranded {
			r.setLastSlow(r.Clock.Now())
		}
		if err := r.Client.Delete(ctx, pod, client.Preconditions{UID: &pod.UID}); client.IgnoreNotFound(err) != nil {
			return reconcile.Result{}, fmt.Errorf("deleting stale pod %s: %w", pod.Name, err)
		}
		r.setLastBatch(r.Clock.Now())
		recreated.WithLabelValues(string(pinning)).Inc()
		r.event(pod, pinning, members)
		log.Info("Deleted a stale Cilium pod for its controller to recreate it pinned to the current control-plane members",
			"pod", pod.Name, "node", pod.Spec.NodeName, "pinning", pinning)
	}
	return reconcile.Result{RequeueAfter: replacementGrace}, nil
}

// replacementGrace is how long after a batch the next one waits at least: its replacements have to exist before
// inFlight can see them (the DaemonSet controller creates them within milliseconds).
const replacementGrace = 2 * time.Second

// inFlight is how long to wait before the next batch: while a batch's replacements are starting — pods pinned to the
// current members that are not Ready yet, younger than BatchTimeout, on Ready nodes (one on a node that is down never
// becomes Ready) — or within replacementGrace of the last deletion. Judged from the cluster, so that a new leader term
// or another replica paces the same way.
func (r *Reconciler) inFlight(current []*corev1.Pod, readyNodes sets.Set[string]) time.Duration {
	wait := replacementGrace - r.Clock.Since(r.lastBatchTime())
	for _, p := range current {
		if age := r.Clock.Since(p.CreationTimestamp.Time); !health.IsPodReady(p) && age < r.Options.BatchTimeout && readyNodes.Has(p.Spec.NodeName) {
			wait = max(wait, min(replacementGrace, r.Options.BatchTimeout-age))
		}
	}
	return wait
}

// admitted are the candidates whose replacements the webhook pins to the current members, as a dry-run create of a
// copy of one pod per owner shows: kube-apiserver runs the whole admission chain for a dry run, and with the webhook
// unreachable (failurePolicy Ignore) or answering from an old view the copy comes back stale. An owner whose probe
// failed is probed again only after ProbeRetry.
func (r *Reconciler) admitted(ctx context.Context, candidates []*corev1.Pod, members apiserverendpoints.ControlPlane, controlPlaneNodes sets.Set[string]) []*corev1.Pod {
	log := logf.FromContext(ctx)
	passed := map[types.UID]bool{}
	var out []*corev1.Pod
	for _, pod := range candidates {
		owner := metav1.GetControllerOf(pod).UID
		ok, probed := passed[owner]
		if !probed {
			if r.Clock.Since(r.probeFailed(owner)) < r.Options.ProbeRetry {
				ok = false
			} else if err := r.probe(ctx, pod, members, controlPlaneNodes); err != nil {
				log.Info("Not recreating stale Cilium pods: a dry-run admission does not pin to the current control-plane members",
					"owner", metav1.GetControllerOf(pod).Name, "reason", err.Error())
				r.setProbeFailed(owner, r.Clock.Now())
				ok = false
			} else {
				ok = true
			}
			passed[owner] = ok
		}
		if ok {
			out = append(out, pod)
		}
	}
	return out
}

// ciliumPods are the scheduled, not terminating pods of Cilium's agent, Envoy and operator.
func (r *Reconciler) ciliumPods(ctx context.Context) ([]*corev1.Pod, error) {
	list := &corev1.PodList{}
	if err := r.Client.List(ctx, list, client.InNamespace(cilium.Namespace)); err != nil {
		return nil, err
	}
	var pods []*corev1.Pod
	for i := range list.Items {
		pod := &list.Items[i]
		if pod.DeletionTimestamp == nil && pod.Spec.NodeName != "" && cilium.IsWorkload(pod.Labels) {
			pods = append(pods, pod)
		}
	}
	return pods, nil
}

// probe creates a copy of pod as a dry run, as its DaemonSet or ReplicaSet would create it (a ReplicaSet's pod is not
// scheduled yet), and checks that the webhook pinned it to the current members.
func (r *Reconciler) probe(ctx context.Context, pod *corev1.Pod, members apiserverendpoints.ControlPlane, controlPlaneNodes sets.Set[string]) error {
	probe := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: pod.Namespace, GenerateName: strings.TrimSuffix(pod.Name, "-") + "-repin-dry-run-",
			Labels: pod.Labels, Annotations: pod.Annotations,
		},
		Spec: *pod.Spec.DeepCopy(),
	}
	probe.Spec.EphemeralContainers = nil // added by `kubectl debug`, refused on create
	if metav1.GetControllerOf(pod).Kind != "DaemonSet" {
		probe.Spec.NodeName = ""
	}
	if err := r.Client.Create(ctx, probe, client.DryRunAll); err != nil {
		return fmt.Errorf("dry-run create: %w", err)
	}
	probe.Spec.NodeName = pod.Spec.NodeName // where the replacement will run, for Classify
	if p := Classify(probe, members, controlPlaneNodes); p != Current {
		return fmt.Errorf("the dry-run copy of %s came back %s", pod.Name, p)
	}
	return nil
}

// orphan tells whether nothing would recreate pod: neither a DaemonSet nor a ReplicaSet controls it.
func orphan(pod *corev1.Pod) bool {
	owner := metav1.GetControllerOf(pod)
	return owner == nil || (owner.Kind != "DaemonSet" && owner.Kind != "ReplicaSet")
}

func (r *Reconciler) event(pod *corev1.Pod, pinning Pinning, members apiserverendpoints.ControlPlane) {
	owner := metav1.GetControllerOf(pod)
	if owner == nil {
		return
	}
	ref := &metav1.PartialObjectMetadata{
		TypeMeta:   metav1.TypeMeta{APIVersion: owner.APIVersion, Kind: owner.Kind},
		ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: owner.Name, UID: owner.UID},
	}
	// The pod as the related object: events of the same regarding object and reason would otherwise fold into one
	// series that keeps the first pod's note (client-go tools/events getKey).
	r.Recorder.Eventf(ref, pod, corev1.EventTypeNormal, EventReason, "Recreate",
		"Recreating pod %s on node %s: its pinning to kube-apiserver is %s (control-plane members now %v)", pod.Name, pod.Spec.NodeName, pinning, members.Addresses)
}

// EventReason is the reason of the event on a pod's DaemonSet or ReplicaSet when the pod is recreated.
const EventReason = "RecreatingStalePod"

// compareReadiness orders NotReady pods before Ready ones: they are the ones without kube-apiserver now.
func compareReadiness(a, b *corev1.Pod) int {
	switch ra, rb := health.IsPodReady(a), health.IsPodReady(b); {
	case ra == rb:
		return strings.Compare(a.Name, b.Name)
	case !ra:
		return -1
	default:
		return 1
	}
}
