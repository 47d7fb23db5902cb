// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package selfhostedshootexposure

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	v1beta1constants "github.com/gardener/gardener/pkg/apis/core/v1beta1/constants"
	extensionsv1alpha1 "github.com/gardener/gardener/pkg/apis/extensions/v1alpha1"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/scheme"
)

// TestRequestReconcile: a trigger's request reaches the stored exposure even when its copy (the cache's) still shows
// the reconcile annotation that Gardener's OperationAnnotationWrapper has already removed; the trigger retries on a
// fresher copy instead of taking the stale annotation for a pending reconciliation. Other operations and exposures
// being deleted are left alone. The fake client stands for kube-apiserver's resourceVersion check.
func TestRequestReconcile(t *testing.T) {
	ctx := context.Background()
	stored := func(annotation string, deleting bool) (client.Client, *extensionsv1alpha1.SelfHostedShootExposure) {
		exp := &extensionsv1alpha1.SelfHostedShootExposure{
			ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "bare-metal"},
			Spec:       extensionsv1alpha1.SelfHostedShootExposureSpec{DefaultSpec: extensionsv1alpha1.DefaultSpec{Type: Type}},
		}
		if annotation != "" {
			metav1.SetMetaDataAnnotation(&exp.ObjectMeta, v1beta1constants.GardenerOperation, annotation)
		}
		if deleting {
			exp.Finalizers = []string{"extensions.gardener.cloud/cilium"}
		}
		c := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(exp).Build()
		if deleting {
			if err := c.Delete(ctx, exp); err != nil {
				t.Fatal(err)
			}
		}
		current := &extensionsv1alpha1.SelfHostedShootExposure{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(exp), current); err != nil {
			t.Fatal(err)
		}
		return c, current
	}
	annotationOf := func(c client.Client, exp *extensionsv1alpha1.SelfHostedShootExposure) string {
		t.Helper()
		now := &extensionsv1alpha1.SelfHostedShootExposure{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(exp), now); err != nil {
			t.Fatal(err)
		}
		return now.Annotations[v1beta1constants.GardenerOperation]
	}

	t.Run("stale copy still showing the annotation", func(t *testing.T) {
		c, cached := stored(v1beta1constants.GardenerOperationReconcile, false)
		stale := cached.DeepCopy()
		// Gardener's wrapper removes the annotation before the reconciler reads the Cluster.
		delete(cached.Annotations, v1beta1constants.GardenerOperation)
		if err := c.Update(ctx, cached); err != nil {
			t.Fatal(err)
		}
		result, err := requestReconcile(ctx, c, stale)
		if err != nil || result.RequeueAfter == 0 {
			t.Fatalf("on a stale copy: result %+v, error %v; want a retry", result, err)
		}
		fresh := &extensionsv1alpha1.SelfHostedShootExposure{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(cached), fresh); err != nil {
			t.Fatal(err)
		}
		if result, err := requestReconcile(ctx, c, fresh); err != nil || result.RequeueAfter != 0 {
			t.Fatalf("on a fresh copy: result %+v, error %v", result, err)
		}
		if got := annotationOf(c, cached); got != v1beta1constants.GardenerOperationReconcile {
			t.Errorf("annotation %q after the retry, want %q", got, v1beta1constants.GardenerOperationReconcile)
		}
	})

	t.Run("reconcile already pending", func(t *testing.T) {
		c, current := stored(v1beta1constants.GardenerOperationReconcile, false)
		if result, err := requestReconcile(ctx, c, current); err != nil || result.RequeueAfter != 0 {
			t.Fatalf("result %+v, error %v", result, err)
		}
		if got := annotationOf(c, current); got != v1beta1constants.GardenerOperationReconcile {
			t.Errorf("annotation %q", got)
		}
	})

	for _, tc := range []struct {
		name       string
		annotation string
		deleting   bool
	}{
		{"another operation pending", v1beta1constants.GardenerOperationWaitForState, false},
		{"being deleted", "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, current := stored(tc.annotation, tc.deleting)
			if result, err := requestReconcile(ctx, c, current); err != nil || result.RequeueAfter != 0 {
				t.Fatalf("result %+v, error %v", result, err)
			}
			if got := annotationOf(c, current); got != tc.annotation {
				t.Errorf("annotation %q, want %q left alone", got, tc.annotation)
			}
		})
	}
}
