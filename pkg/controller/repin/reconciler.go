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
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/apiserverendpoints"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/cilium"
)

// Options bound how fast stale pods are recreated.
type Options struct {
	// BatchSize is how many stranded pods are deleted at once. A starting agent lists and watches much of the
	// cluster, so the batch, not maxUnavailable, is what kube-apiserver has to absorb at a time; the next batch
	// follows as soon as this one's replacements are ready.
	BatchSize int
	// BatchTimeout is how long a batch's replacements may take to be ready before the next batch goes anyway.
	BatchTimeout time.Duration
	// SlowInterval is the least time between two recreations of degraded or unpinned pods, which still reach
	// kube-apiserver.
	SlowInterval time.Duration
}

// DefaultOptions: 50 agents starting at once is what a kube-apiserver of a few hundred nodes absorbs without its
// priority and fairness queues filling; a thousand stranded agents are back in twenty batches, minutes rather than
// the hours one node at a time would take.
var DefaultOptions = Options{BatchSize: 50, BatchTimeout: 2 * time.Minute, SlowInterval: time.Minute}

// Reconciler recreates Cilium's pods whose pinning is stale (Classify): it deletes them, and their DaemonSet or
// ReplicaSet creates replacements, which the webhook pins to the current members. It deletes only after a dry-run
// create of such a pod came back from kube-apiserver pinned to the current members, which proves the whole admission
// path; stranded pods first (NotReady ones before Ready ones) in batches, degraded and unpinned ones one at a time.
type Reconciler struct {
	Client   client.Client
	Recorder record.EventRecorder
	Clock    clock.Clock
	Options  Options

	mu       sync.Mutex
	batch    *batch
	lastSlow time.Time
}

// batch is a set of deleted pods whose replacements are awaited.
type batch struct {
	deleted  []deletedPod
	deadline time.Time
}

type deletedPod struct {
	owner   metav1.OwnerReference
	node    string // the DaemonSet's node; "" for a ReplicaSet's pod
	deleted time.Time
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
	controlPlaneNodes := sets.New[string]()
	for i := range nodes.Items {
		if apiserverendpoints.IsControlPlaneNode(&nodes.Items[i]) {
			controlPlaneNodes.Insert(nodes.Items[i].Name)
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

	if wait := r.awaitBatch(pods); wait > 0 {
		return reconcile.Result{RequeueAfter: wait}, nil
	}
	stranded := byPinning[Stranded]
	slices.SortStableFunc(stranded, func(a, b *corev1.Pod) int { return compareReadiness(a, b) })
	stranded = stranded[:min(len(stranded), r.Options.BatchSize)]
	var slow []*corev1.Pod
	slowWait := r.Options.SlowInterval - r.Clock.Since(r.lastSlow)
	if others := slices.Concat(byPinning[Degraded], byPinning[Unpinned]); len(others) > 0 && slowWait <= 0 {
		slow = others[:1]
	}
	candidates := slices.Concat(stranded, slow)
	if len(candidates) == 0 {
		if len(byPinning[Degraded])+len(byPinning[Unpinned]) > 0 {
			return reconcile.Result{RequeueAfter: slowWait}, nil
		}
		return reconcile.Result{}, nil
	}

	if err := r.admittedCurrent(ctx, candidates[0], members, controlPlaneNodes); err != nil {
		log.Info("Not recreating stale Cilium pods: a dry-run admission does not pin to the current control-plane members", "reason", err.Error())
		return reconcile.Result{RequeueAfter: r.Options.SlowInterval}, nil
	}
	b := &batch{deadline: r.Clock.Now().Add(r.Options.BatchTimeout)}
	for _, pod := range candidates {
		pinning := Classify(pod, members, controlPlaneNodes)
		if err := r.Client.Delete(ctx, pod, client.Preconditions{UID: &pod.UID}); client.IgnoreNotFound(err) != nil {
			return reconcile.Result{}, fmt.Errorf("deleting stale pod %s: %w", pod.Name, err)
		}
		recreated.WithLabelValues(string(pinning)).Inc()
		r.event(pod, pinning, members)
		log.Info("Deleted a stale Cilium pod for its controller to recreate it pinned to the current control-plane members",
			"pod", pod.Name, "node", pod.Spec.NodeName, "pinning", pinning)
		if owner := metav1.GetControllerOf(pod); owner != nil {
			d := deletedPod{owner: *owner, deleted: r.Clock.Now()}
			if owner.Kind == "DaemonSet" {
				d.node = pod.Spec.NodeName
			}
			b.deleted = append(b.deleted, d)
		}
	}
	r.mu.Lock()
	r.batch = b
	if len(slow) > 0 {
		r.lastSlow = r.Clock.Now()
	}
	r.mu.Unlock()
	return reconcile.Result{RequeueAfter: time.Second}, nil
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

// awaitBatch is how long to wait before the next batch: until every pod of the last batch has a Ready replacement
// (its DaemonSet's pod on the same node, or a pod of its ReplicaSet created since), or the batch's deadline.
func (r *Reconciler) awaitBatch(pods []*corev1.Pod) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.batch == nil {
		return 0
	}
	if !r.Clock.Now().Before(r.batch.deadline) {
		r.batch = nil
		return 0
	}
	for _, d := range r.batch.deleted {
		if !slices.ContainsFunc(pods, func(p *corev1.Pod) bool { return d.replacedBy(p) }) {
			return min(2*time.Second, r.batch.deadline.Sub(r.Clock.Now()))
		}
	}
	r.batch = nil
	return 0
}

func (d deletedPod) replacedBy(p *corev1.Pod) bool {
	owner := metav1.GetControllerOf(p)
	return owner != nil && owner.UID == d.owner.UID && (d.node == "" || p.Spec.NodeName == d.node) &&
		!p.CreationTimestamp.Time.Before(d.deleted.Truncate(time.Second)) && isReady(p)
}

// admittedCurrent creates a copy of pod as a dry run, as its DaemonSet or ReplicaSet would create it on its node, and
// checks that the webhook pinned it to the current members. kube-apiserver runs the whole admission chain for a dry
// run; with the webhook unreachable (failurePolicy Ignore) or working from an old view, the copy comes back stale.
func (r *Reconciler) admittedCurrent(ctx context.Context, pod *corev1.Pod, members apiserverendpoints.ControlPlane, controlPlaneNodes sets.Set[string]) error {
	probe := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: pod.Namespace, GenerateName: strings.TrimSuffix(pod.Name, "-") + "-repin-dry-run-",
			Labels: pod.Labels, Annotations: pod.Annotations,
		},
		Spec: *pod.Spec.DeepCopy(),
	}
	if err := r.Client.Create(ctx, probe, client.DryRunAll); err != nil {
		return fmt.Errorf("dry-run create: %w", err)
	}
	if p := Classify(probe, members, controlPlaneNodes); p != Current {
		return fmt.Errorf("the dry-run copy of %s came back %s", pod.Name, p)
	}
	return nil
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
	r.Recorder.Eventf(ref, corev1.EventTypeNormal, EventReason,
		"Recreating pod %s on node %s: its pinning to kube-apiserver is %s (control-plane members now %v)", pod.Name, pod.Spec.NodeName, pinning, members.Addresses)
}

// EventReason is the reason of the event on a pod's DaemonSet or ReplicaSet when the pod is recreated.
const EventReason = "RecreatingStalePod"

func isReady(p *corev1.Pod) bool {
	return slices.ContainsFunc(p.Status.Conditions, func(c corev1.PodCondition) bool {
		return c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue
	})
}

// compareReadiness orders NotReady pods before Ready ones: they are the ones without kube-apiserver now.
func compareReadiness(a, b *corev1.Pod) int {
	switch ra, rb := isReady(a), isReady(b); {
	case ra == rb:
		return strings.Compare(a.Name, b.Name)
	case !ra:
		return -1
	default:
		return 1
	}
}
