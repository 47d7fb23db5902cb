// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package managedresourceretry

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1beta1helper "github.com/gardener/gardener/pkg/api/core/v1beta1/helper"
	gardencorev1beta1 "github.com/gardener/gardener/pkg/apis/core/v1beta1"
	v1beta1constants "github.com/gardener/gardener/pkg/apis/core/v1beta1/constants"
	resourcesv1alpha1 "github.com/gardener/gardener/pkg/apis/resources/v1alpha1"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/identity"
)

// RefusalMarker is part of the message of both keep-pinned ValidatingAdmissionPolicies of the extension's chart
// (templates/admissionpolicy.yaml), which the resource manager copies into the ManagedResource's ResourcesApplied
// condition when they refuse its apply.
const RefusalMarker = "is pinned to reach kube-apiserver without Cilium (gardener-extension-cilium-selfhosted)"

// MinInterval is the least time between two reconciles the extension requests for one ManagedResource. If
// kube-apiserver still cannot reach the webhook, the resource manager's apply is refused again, and the extension asks
// again only after this; it bounds how long an apply waits once the webhook is reachable again.
const MinInterval = 30 * time.Second

// Reconciler requests a reconcile of a ManagedResource whose apply the keep-pinned policies refused: the resource
// manager would otherwise retry only after its exponential backoff, which grows to about 17 minutes
// (pkg/resourcemanager/controller/managedresource/reconciler.go), while the webhook may have been answering again for
// long. It sets `gardener.cloud/operation: reconcile`, which the resource manager reacts to and removes
// (pkg/resourcemanager/predicate/has_operation_annotation.go, pkg/controllerutils/reconciler OperationAnnotationWrapper).
type Reconciler struct {
	Client   client.Client
	Recorder events.EventRecorder
	Clock    clock.Clock

	mu        sync.Mutex
	requested map[client.ObjectKey]time.Time
}

// Reconcile implements reconcile.Reconciler.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	mr := &resourcesv1alpha1.ManagedResource{}
	if err := r.Client.Get(ctx, req.NamespacedName, mr); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	refusal := Refusal(mr)
	if _, requested := mr.Annotations[v1beta1constants.GardenerOperation]; refusal == "" || requested {
		return reconcile.Result{}, nil
	}
	if wait := r.untilAllowed(req.NamespacedName); wait > 0 {
		return reconcile.Result{RequeueAfter: wait}, nil
	}
	patch := client.MergeFrom(mr.DeepCopy())
	metav1.SetMetaDataAnnotation(&mr.ObjectMeta, v1beta1constants.GardenerOperation, v1beta1constants.GardenerOperationReconcile)
	if err := r.Client.Patch(ctx, mr, patch); err != nil {
		return reconcile.Result{}, fmt.Errorf("requesting a reconcile of ManagedResource %s: %w", req.NamespacedName, err)
	}
	r.remember(req.NamespacedName)
	retries.WithLabelValues(req.String()).Inc()
	// The refusal itself is in the event and the ManagedResource's condition.
	logf.FromContext(ctx).Info("Requested a reconcile of a ManagedResource whose apply the keep-pinned policies refused")
	r.Recorder.Eventf(mr, nil, corev1.EventTypeNormal, EventReason, "RequestReconcile", "%s", identity.EventNote(fmt.Sprintf(
		"Requested a reconcile: the keep-pinned admission policies refused its last apply while the extension's webhook did not answer, and the extension runs again (%s)", refusal)))
	return reconcile.Result{RequeueAfter: MinInterval}, nil
}

// EventReason is the reason of the event on a ManagedResource whose reconcile the extension requested.
const EventReason = "ReconcileRequested"

// Refusal is the message of mr's ResourcesApplied condition when the keep-pinned policies refused its last apply,
// else "".
func Refusal(mr *resourcesv1alpha1.ManagedResource) string {
	applied := v1beta1helper.GetCondition(mr.Status.Conditions, resourcesv1alpha1.ResourcesApplied)
	if applied == nil || applied.Status != gardencorev1beta1.ConditionFalse || !strings.Contains(applied.Message, RefusalMarker) {
		return ""
	}
	return applied.Message
}

func (r *Reconciler) untilAllowed(key client.ObjectKey) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	last, ok := r.requested[key]
	if !ok {
		return 0
	}
	return MinInterval - r.Clock.Since(last)
}

func (r *Reconciler) remember(key client.ObjectKey) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.requested == nil {
		r.requested = map[client.ObjectKey]time.Time{}
	}
	r.requested[key] = r.Clock.Now()
}
