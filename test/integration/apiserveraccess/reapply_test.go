// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package apiserveraccess_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gardencorev1beta1 "github.com/gardener/gardener/pkg/apis/core/v1beta1"
	resourcesv1alpha1 "github.com/gardener/gardener/pkg/apis/resources/v1alpha1"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/apiserverendpoints"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/cilium"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/controller/managedresourceretry"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/resourcemanager"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/testenv"
	"github.com/gardener/gardener-extension-cilium-selfhosted/webhook/apiserveraccess"
)

func pinned(d *appsv1.DaemonSet) bool {
	return slices.ContainsFunc(d.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == apiserverendpoints.VolumeName })
}

// stored reads objs as kube-apiserver stores them now.
func stored(t *testing.T, objs ...client.Object) []client.Object {
	t.Helper()
	var out []client.Object
	for _, obj := range objs {
		current := obj.DeepCopyObject().(client.Object)
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(obj), current); err != nil {
			t.Fatal(err)
		}
		out = append(out, current)
	}
	return out
}

// TestResourceManagerReapplyKeepsCiliumPinned: Gardener's resource manager re-applies networking-cilium's
// ManagedResource (its own reconciler, as on every resync) while the webhook is unreachable. The chart's admission
// policies refuse the update of every object the webhook had pinned, the ManagedResource's ResourcesApplied condition
// says so, and the stored objects stay as they were. With the webhook back, the next reconciliation succeeds and
// changes nothing (same generation, same resourceVersion), so no agent rolls.
func TestResourceManagerReapplyKeepsCiliumPinned(t *testing.T) {
	ctx := context.Background()
	rendered := installChart(t)
	rm := shootResourceManager(t)
	pinnedObjs := []client.Object{rendered.Agent, rendered.Operator, rendered.Config}
	before := stored(t, pinnedObjs...)
	if !pinned(before[0].(*appsv1.DaemonSet)) {
		t.Fatal("the stored agent DaemonSet is not pinned to begin with")
	}

	env.Extensions().Stop(ctx, false)
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			_ = env.Extensions().StartAgain()
		}
	})
	err := rm.Reconcile(ctx, cilium.Namespace, ciliumManagedResource)
	if err == nil || !strings.Contains(err.Error(), "gardener-extension-cilium-selfhosted") || !strings.Contains(err.Error(), "retry once it does") {
		t.Errorf("the resource manager re-applying Cilium's chart while the webhook is down: %v, want a refusal by the chart's admission policy", err)
	}
	applied, getErr := rm.Applied(ctx, cilium.Namespace, ciliumManagedResource)
	if getErr != nil {
		t.Fatal(getErr)
	}
	if applied == nil || applied.Status != gardencorev1beta1.ConditionFalse || !strings.Contains(applied.Message, "retry once it does") {
		t.Errorf("ResourcesApplied while the webhook is down: %+v, want False with the policy's message", applied)
	}
	for i, obj := range stored(t, pinnedObjs...) {
		if obj.GetResourceVersion() != before[i].GetResourceVersion() {
			t.Errorf("%T %s changed while the webhook was down: resourceVersion %s -> %s", obj, obj.GetName(), before[i].GetResourceVersion(), obj.GetResourceVersion())
		}
	}

	if err := env.Extensions().StartAgain(); err != nil {
		t.Fatal(err)
	}
	restarted = true
	waitUntilMutating(t, rendered.Agent)
	if err := rm.Reconcile(ctx, cilium.Namespace, ciliumManagedResource); err != nil {
		t.Errorf("the resource manager re-applying Cilium's chart with the webhook back: %v", err)
	}
	if applied, err := rm.Applied(ctx, cilium.Namespace, ciliumManagedResource); err != nil || applied == nil || applied.Status != gardencorev1beta1.ConditionTrue {
		t.Errorf("ResourcesApplied with the webhook back: %+v (%v), want True", applied, err)
	}
	for i, obj := range stored(t, pinnedObjs...) {
		if obj.GetResourceVersion() != before[i].GetResourceVersion() || obj.GetGeneration() != before[i].GetGeneration() {
			t.Errorf("re-applying with the webhook back changed %T %s: resourceVersion %s -> %s, generation %d -> %d",
				obj, obj.GetName(), before[i].GetResourceVersion(), obj.GetResourceVersion(), before[i].GetGeneration(), obj.GetGeneration())
		}
	}
}

// TestResourceManagerKeepsTheWebhooks: the extension's chart ships its MutatingWebhookConfiguration without webhooks
// (so that the extension needs no RBAC to create one), and the extension fills it in. Gardener's resource manager
// re-applying the chart, as on every resync, leaves the webhooks and their CA bundle in place.
func TestResourceManagerKeepsTheWebhooks(t *testing.T) {
	ctx := context.Background()
	rm, err := resourcemanager.New(env.Config, env.Client, resourcemanager.SeedClass)
	if err != nil {
		t.Fatal(err)
	}
	before := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: testenv.WebhookConfigName}}
	before = stored(t, before)[0].(*admissionregistrationv1.MutatingWebhookConfiguration)
	if len(before.Webhooks) != len(apiserveraccess.WebhookNames) {
		t.Fatalf("%d webhooks registered before the re-apply, want %d", len(before.Webhooks), len(apiserveraccess.WebhookNames))
	}
	if err := rm.Reconcile(ctx, cilium.Namespace, testenv.RegistrationName); err != nil {
		t.Fatalf("the resource manager re-applying the extension's chart: %v", err)
	}
	after := stored(t, before)[0].(*admissionregistrationv1.MutatingWebhookConfiguration)
	if after.ResourceVersion != before.ResourceVersion || !equality.Semantic.DeepEqual(after.Webhooks, before.Webhooks) {
		t.Errorf("the re-apply changed the webhook configuration: resourceVersion %s -> %s, %d webhooks", before.ResourceVersion, after.ResourceVersion, len(after.Webhooks))
	}
}

// TestRefusedApplyRetriedWhenWebhookReturns: Gardener's resource manager runs its own controller, as in production.
// With the extension stopped, networking-cilium changes its ManagedResource's Secret; the resource manager's apply is
// refused by the keep-pinned policies, and it retries with controller-runtime's exponential backoff, which after the
// 30 s outage here has grown to about 20 s and keeps doubling up to about 17 minutes. Once the extension runs again it
// requests a reconcile (event ReconcileRequested) and the apply succeeds, within 60 s of the extension's return
// whatever the backoff has grown to.
func TestRefusedApplyRetriedWhenWebhookReturns(t *testing.T) {
	ctx := context.Background()
	installChart(t)
	rm := shootResourceManager(t)
	running, stopRM := context.WithCancel(ctx)
	rmDone := make(chan error, 1)
	go func() { rmDone <- rm.Run(running) }()
	t.Cleanup(func() {
		stopRM()
		if err := <-rmDone; err != nil {
			t.Errorf("the resource manager: %v", err)
		}
	})
	applied := func(status gardencorev1beta1.ConditionStatus, marker string) func(context.Context) (bool, error) {
		return func(ctx context.Context) (bool, error) {
			c, err := rm.Applied(ctx, cilium.Namespace, ciliumManagedResource)
			return err == nil && c != nil && c.Status == status && strings.Contains(c.Message, marker), err
		}
	}
	if err := testenv.WaitFor(ctx, time.Minute, applied(gardencorev1beta1.ConditionTrue, "")); err != nil {
		t.Fatalf("the resource manager does not apply Cilium's chart with the webhook up: %v", err)
	}

	env.Extensions().Stop(ctx, false)
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			_ = env.Extensions().StartAgain()
		}
	})
	mr := &resourcesv1alpha1.ManagedResource{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: cilium.Namespace, Name: ciliumManagedResource}, mr); err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: cilium.Namespace, Name: mr.Spec.SecretRefs[0].Name}}
	patch := client.MergeFrom(secret.DeepCopy())
	metav1.SetMetaDataLabel(&secret.ObjectMeta, "test.cilium-selfhosted/revision", t.Name())
	if err := env.Client.Patch(ctx, secret, patch); err != nil {
		t.Fatal(err)
	}
	if err := testenv.WaitFor(ctx, time.Minute, applied(gardencorev1beta1.ConditionFalse, managedresourceretry.RefusalMarker)); err != nil {
		t.Fatalf("the resource manager's apply with the webhook down is not refused by the keep-pinned policies: %v", err)
	}
	time.Sleep(30 * time.Second) // the outage itself, during which the resource manager backs off

	if err := env.Extensions().StartAgain(); err != nil {
		t.Fatal(err)
	}
	restarted = true
	back := time.Now()
	if err := testenv.WaitFor(ctx, time.Minute, applied(gardencorev1beta1.ConditionTrue, "")); err != nil {
		t.Fatalf("Cilium's ManagedResource is not applied within 60 s of the extension's return: %v", err)
	}
	t.Logf("applied %s after the extension was ready again", time.Since(back).Round(100*time.Millisecond))
	if err := testenv.WaitForEvent(ctx, env.Client, cilium.Namespace, func(e corev1.Event) bool {
		return e.InvolvedObject.Name == ciliumManagedResource && e.Reason == managedresourceretry.EventReason
	}); err != nil {
		t.Errorf("the extension did not request the reconcile (no ReconcileRequested event): the apply came from the resource manager's own backoff: %v", err)
	}
}
