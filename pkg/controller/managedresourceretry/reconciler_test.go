// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package managedresourceretry_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	testclock "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	gardencorev1beta1 "github.com/gardener/gardener/pkg/apis/core/v1beta1"
	v1beta1constants "github.com/gardener/gardener/pkg/apis/core/v1beta1/constants"
	resourcesv1alpha1 "github.com/gardener/gardener/pkg/apis/resources/v1alpha1"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/cilium"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/controller/managedresourceretry"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/scheme"
)

// refused is the message the resource manager copies from a keep-pinned policy's refusal (as in
// test/integration/apiserveraccess TestResourceManagerReapplyKeepsCiliumPinned).
const refused = `error during apply of object "apps/v1/DaemonSet/kube-system/cilium": admission webhook denied: ValidatingAdmissionPolicy 'gardener-extension-cilium-selfhosted-keep-workloads-pinned' denied request: DaemonSet cilium ` +
	managedresourceretry.RefusalMarker + `, and this update would unpin it: its webhook did not answer; retry once it does`

func managedResource(status gardencorev1beta1.ConditionStatus, message string, annotations map[string]string) *resourcesv1alpha1.ManagedResource {
	return &resourcesv1alpha1.ManagedResource{
		ObjectMeta: metav1.ObjectMeta{Namespace: cilium.ManagedResource.Namespace, Name: cilium.ManagedResource.Name, Annotations: annotations},
		Spec:       resourcesv1alpha1.ManagedResourceSpec{SecretRefs: []corev1.LocalObjectReference{{Name: "managedresource-extension-networking-cilium-config"}}},
		Status: resourcesv1alpha1.ManagedResourceStatus{Conditions: []gardencorev1beta1.Condition{{
			Type: resourcesv1alpha1.ResourcesApplied, Status: status, Message: message,
		}}},
	}
}

type fixture struct {
	client   client.Client
	clock    *testclock.FakeClock
	recorder *events.FakeRecorder
	r        *managedresourceretry.Reconciler
}

func newFixture(mr *resourcesv1alpha1.ManagedResource) *fixture {
	f := &fixture{
		client:   fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(mr).WithStatusSubresource(mr).Build(),
		clock:    testclock.NewFakeClock(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)),
		recorder: events.NewFakeRecorder(10),
	}
	f.r = &managedresourceretry.Reconciler{Client: f.client, Recorder: f.recorder, Clock: f.clock}
	return f
}

func (f *fixture) reconcile(t *testing.T) reconcile.Result {
	t.Helper()
	result, err := f.r.Reconcile(context.Background(), reconcile.Request{NamespacedName: cilium.ManagedResource})
	if err != nil {
		t.Fatal(err)
	}
	return result
}

func (f *fixture) stored(t *testing.T) *resourcesv1alpha1.ManagedResource {
	t.Helper()
	mr := &resourcesv1alpha1.ManagedResource{}
	if err := f.client.Get(context.Background(), cilium.ManagedResource, mr); err != nil {
		t.Fatal(err)
	}
	return mr
}

// TestRequestsReconcileAfterRefusal: a refusal by the keep-pinned policies gets the operation annotation, an event and
// a requeue after MinInterval; the other annotations and the spec stay.
func TestRequestsReconcileAfterRefusal(t *testing.T) {
	f := newFixture(managedResource(gardencorev1beta1.ConditionFalse, refused, map[string]string{"origin": "networking-cilium"}))
	if result := f.reconcile(t); result.RequeueAfter != managedresourceretry.MinInterval {
		t.Errorf("requeue after %v, want %v", result.RequeueAfter, managedresourceretry.MinInterval)
	}
	mr := f.stored(t)
	if got := mr.Annotations[v1beta1constants.GardenerOperation]; got != v1beta1constants.GardenerOperationReconcile {
		t.Errorf("operation annotation %q, want reconcile", got)
	}
	if mr.Annotations["origin"] != "networking-cilium" || len(mr.Spec.SecretRefs) != 1 {
		t.Errorf("the request changed more than the annotation: %+v", mr.ObjectMeta)
	}
	select {
	case e := <-f.recorder.Events:
		if !strings.Contains(e, managedresourceretry.EventReason) || !strings.Contains(e, "keep-workloads-pinned") {
			t.Errorf("event %q", e)
		}
	default:
		t.Error("no event")
	}
}

// TestRequestsAreSpaced: the resource manager removed the annotation and was refused again (kube-apiserver still
// cannot reach the webhook): the next request waits until MinInterval has passed since the last one.
func TestRequestsAreSpaced(t *testing.T) {
	f := newFixture(managedResource(gardencorev1beta1.ConditionFalse, refused, nil))
	f.reconcile(t)
	mr := f.stored(t)
	delete(mr.Annotations, v1beta1constants.GardenerOperation)
	if err := f.client.Update(context.Background(), mr); err != nil {
		t.Fatal(err)
	}
	f.clock.Step(10 * time.Second)
	if result := f.reconcile(t); result.RequeueAfter != managedresourceretry.MinInterval-10*time.Second {
		t.Errorf("requeue after %v, want the rest of MinInterval", result.RequeueAfter)
	}
	if _, ok := f.stored(t).Annotations[v1beta1constants.GardenerOperation]; ok {
		t.Error("requested again before MinInterval passed")
	}
	f.clock.Step(managedresourceretry.MinInterval)
	f.reconcile(t)
	if _, ok := f.stored(t).Annotations[v1beta1constants.GardenerOperation]; !ok {
		t.Error("not requested again after MinInterval")
	}
}

// TestLeavesOtherStatesAlone: applied, failed for another reason, or with an operation already requested (by
// gardenlet, an operator or the extension itself), the ManagedResource is not touched.
func TestLeavesOtherStatesAlone(t *testing.T) {
	for name, mr := range map[string]*resourcesv1alpha1.ManagedResource{
		"applied":             managedResource(gardencorev1beta1.ConditionTrue, "All resources are applied.", nil),
		"another failure":     managedResource(gardencorev1beta1.ConditionFalse, "error during apply: connection refused", nil),
		"operation requested": managedResource(gardencorev1beta1.ConditionFalse, refused, map[string]string{v1beta1constants.GardenerOperation: "wait-for-state"}),
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(mr)
			if result := f.reconcile(t); result.RequeueAfter != 0 {
				t.Errorf("requeue after %v", result.RequeueAfter)
			}
			if got, want := f.stored(t).Annotations, mr.Annotations; len(got) != len(want) {
				t.Errorf("annotations %v, want %v", got, want)
			}
		})
	}
}
