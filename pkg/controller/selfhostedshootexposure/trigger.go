// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package selfhostedshootexposure

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1beta1constants "github.com/gardener/gardener/pkg/apis/core/v1beta1/constants"
	extensionsv1alpha1 "github.com/gardener/gardener/pkg/apis/extensions/v1alpha1"
	"github.com/gardener/gardener/pkg/extensions"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/exposure/resources"
)

// serviceTriggerName names the controller that watches the exposures' Services.
const serviceTriggerName = ControllerName + "-service"

// addServiceTrigger asks for a reconciliation of an exposure whose Service has a VIP that its status does not show.
func addServiceTrigger(mgr manager.Manager) error {
	return builder.ControllerManagedBy(mgr).
		Named(serviceTriggerName).
		Watches(&corev1.Service{}, handler.EnqueueRequestsFromMapFunc(toExposure), builder.WithPredicates(ingressChanged)).
		Complete(&exposureTrigger{client: mgr.GetClient(), wanted: vipNotInStatus})
}

func toExposure(_ context.Context, obj client.Object) []reconcile.Request {
	name, namespace := obj.GetLabels()[resources.LabelExposureName], obj.GetLabels()[resources.LabelExposureNamespace]
	if name == "" || namespace == "" || obj.GetName() != resources.ServiceName(name) {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: namespace, Name: name}}}
}

var ingressChanged = predicate.Funcs{
	CreateFunc: func(e event.CreateEvent) bool { return len(e.Object.(*corev1.Service).Status.LoadBalancer.Ingress) > 0 },
	UpdateFunc: func(e event.UpdateEvent) bool {
		return !equality.Semantic.DeepEqual(e.ObjectOld.(*corev1.Service).Status.LoadBalancer, e.ObjectNew.(*corev1.Service).Status.LoadBalancer)
	},
	DeleteFunc:  func(event.DeleteEvent) bool { return false },
	GenericFunc: func(event.GenericEvent) bool { return false },
}

// vipNotInStatus: the exposure's Service has a VIP that its status does not show.
func vipNotInStatus(ctx context.Context, c client.Client, exp *extensionsv1alpha1.SelfHostedShootExposure) (bool, error) {
	// Not created yet: its first reconciliation reads the VIP; one in progress is not skipped (exposure-controller.md).
	if exp.Status.LastOperation == nil {
		return false, nil
	}
	svc := &corev1.Service{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: exp.Namespace, Name: resources.ServiceName(exp.Name)}, svc); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	return len(svc.Status.LoadBalancer.Ingress) > 0 && !equality.Semantic.DeepEqual(ingressOf(svc), exp.Status.Ingress), nil
}

// exposureTrigger asks for a reconciliation of the exposure a request names, when wanted (if set) says it is needed.
type exposureTrigger struct {
	client client.Client
	wanted func(context.Context, client.Client, *extensionsv1alpha1.SelfHostedShootExposure) (bool, error)
}

func (t *exposureTrigger) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	exp := &extensionsv1alpha1.SelfHostedShootExposure{}
	if err := t.client.Get(ctx, req.NamespacedName, exp); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if t.wanted != nil {
		if wanted, err := t.wanted(ctx, t.client, exp); err != nil || !wanted {
			return reconcile.Result{}, err
		}
	}
	return requestReconcile(ctx, t.client, exp)
}

// requestReconcile asks Gardener's generic reconciler for a reconciliation of exp with the operation annotation,
// unless exp is not of this controller, is being deleted or has another operation pending. The patch always goes out,
// on exp's resourceVersion, also when the cached exp already asks for one (docs/development/exposure-controller.md).
func requestReconcile(ctx context.Context, c client.Client, exp *extensionsv1alpha1.SelfHostedShootExposure) (reconcile.Result, error) {
	if op := exp.Annotations[v1beta1constants.GardenerOperation]; exp.Spec.Type != Type || exp.DeletionTimestamp != nil ||
		(op != "" && op != v1beta1constants.GardenerOperationReconcile) {
		return reconcile.Result{}, nil
	}
	patch := client.MergeFromWithOptions(exp.DeepCopy(), client.MergeFromWithOptimisticLock{})
	metav1.SetMetaDataAnnotation(&exp.ObjectMeta, v1beta1constants.GardenerOperation, v1beta1constants.GardenerOperationReconcile)
	switch err := c.Patch(ctx, exp, patch); {
	case apierrors.IsConflict(err):
		return reconcile.Result{RequeueAfter: staleCacheRetry}, nil
	default:
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
}

// staleCacheRetry is how long a trigger waits before it retries on a fresher copy of the exposure: the cache usually
// catches up within milliseconds.
const staleCacheRetry = 100 * time.Millisecond

// clusterTriggerName names the controller that watches the Cluster resources.
const clusterTriggerName = ControllerName + "-cluster"

// addClusterTrigger asks for a reconciliation of the cilium exposures in a Cluster's namespace when the parts of its
// Shoot the exposure reads change, which Gardener does not copy into the exposure.
func addClusterTrigger(mgr manager.Manager) error {
	return builder.ControllerManagedBy(mgr).
		Named(clusterTriggerName).
		Watches(&extensionsv1alpha1.Cluster{}, &handler.EnqueueRequestForObject{}, builder.WithPredicates(exposureInputChanged)).
		Complete(&clusterTrigger{client: mgr.GetClient()})
}

// exposureInputChanged: the parts of the Shoot the exposure reads changed.
var exposureInputChanged = predicate.Funcs{
	CreateFunc: func(event.CreateEvent) bool { return false },
	UpdateFunc: func(e event.UpdateEvent) bool {
		return !equality.Semantic.DeepEqual(exposureInput(e.ObjectOld), exposureInput(e.ObjectNew))
	},
	DeleteFunc:  func(event.DeleteEvent) bool { return false },
	GenericFunc: func(event.GenericEvent) bool { return false },
}

// exposureInput is what of the Cluster's Shoot the exposure depends on: its workers, networking and kube-proxy setting.
// A Shoot that does not decode counts as changed, so that the exposure reports it.
func exposureInput(obj client.Object) any {
	shoot, err := extensions.ShootFromCluster(obj.(*extensionsv1alpha1.Cluster))
	if err != nil || shoot == nil {
		return obj.GetResourceVersion()
	}
	return []any{shoot.Spec.Provider.Workers, shoot.Spec.Networking, shoot.Spec.Kubernetes.KubeProxy}
}

type clusterTrigger struct {
	client client.Client
}

func (t *clusterTrigger) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	list := &extensionsv1alpha1.SelfHostedShootExposureList{}
	if err := t.client.List(ctx, list, client.InNamespace(req.Name)); err != nil {
		return reconcile.Result{}, err
	}
	var retry reconcile.Result
	for i := range list.Items {
		result, err := requestReconcile(ctx, t.client, &list.Items[i])
		if err != nil {
			return reconcile.Result{}, err
		}
		if result.RequeueAfter > 0 {
			retry = result
		}
	}
	return retry, nil
}

// leaderTriggerName names the controller that has a new leader reconcile the exposures once.
const leaderTriggerName = ControllerName + "-leader"

// addLeaderTrigger has every exposure that was reconciled before reconciled once more when a leader term starts, so
// that its endpoints' probes start; the informer lists the exposures at the start as create events.
func addLeaderTrigger(mgr manager.Manager) error {
	return builder.ControllerManagedBy(mgr).
		Named(leaderTriggerName).
		For(&extensionsv1alpha1.SelfHostedShootExposure{}, builder.WithPredicates(predicate.Funcs{
			CreateFunc:  func(event.CreateEvent) bool { return true },
			UpdateFunc:  func(event.UpdateEvent) bool { return false },
			DeleteFunc:  func(event.DeleteEvent) bool { return false },
			GenericFunc: func(event.GenericEvent) bool { return false },
		})).
		Complete(&exposureTrigger{client: mgr.GetClient(), wanted: reconciledBefore})
}

// reconciledBefore: the exposure has been reconciled; its first reconciliation comes without asking.
func reconciledBefore(_ context.Context, _ client.Client, exp *extensionsv1alpha1.SelfHostedShootExposure) (bool, error) {
	return exp.Status.LastOperation != nil, nil
}
