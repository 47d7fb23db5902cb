// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package apiserveraccess

import (
	"context"
	"slices"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	extensionswebhook "github.com/gardener/gardener/extensions/pkg/webhook"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/scheme"
)

// TestWithMatchConditions: whichever way Gardener's wiring writes the webhook configuration (created, updated, patched
// from what it built without conditions), the extension's webhooks carry their match conditions, and nothing else
// changes: another's webhook under a name like ours, conditions set by the caller on it, other kinds.
func TestWithMatchConditions(t *testing.T) {
	const suffix = ".cilium-selfhosted.extensions.gardener.cloud"
	foreign := admissionregistrationv1.MatchCondition{Name: "theirs", Expression: "true"}
	built := func() *admissionregistrationv1.MutatingWebhookConfiguration {
		return &admissionregistrationv1.MutatingWebhookConfiguration{
			ObjectMeta: metav1.ObjectMeta{Name: "gardener-extension-cilium-selfhosted"},
			Webhooks: []admissionregistrationv1.MutatingWebhook{
				{Name: AgentWebhookName + suffix},
				{Name: ConfigWebhookName + suffix, MatchConditions: []admissionregistrationv1.MatchCondition{foreign}},
				{Name: ConfigWebhookName + ".example.com", MatchConditions: []admissionregistrationv1.MatchCondition{foreign}},
			},
		}
	}
	want := [][]admissionregistrationv1.MatchCondition{nil, MatchConditions[ConfigWebhookName], {foreign}}
	for _, tc := range []struct {
		name  string
		write func(context.Context, client.Client, *admissionregistrationv1.MutatingWebhookConfiguration) error
	}{
		{"create", func(ctx context.Context, c client.Client, mwc *admissionregistrationv1.MutatingWebhookConfiguration) error {
			return c.Create(ctx, mwc)
		}},
		{"update", func(ctx context.Context, c client.Client, mwc *admissionregistrationv1.MutatingWebhookConfiguration) error {
			if err := c.Create(ctx, &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: mwc.ObjectMeta}); err != nil {
				return err
			}
			current := &admissionregistrationv1.MutatingWebhookConfiguration{}
			if err := c.Get(ctx, client.ObjectKeyFromObject(mwc), current); err != nil {
				return err
			}
			current.Webhooks = mwc.Webhooks
			return c.Update(ctx, current)
		}},
		// Gardener's registration at start: a strategic merge patch, computed before it is sent, from the stored object
		// (with the conditions) to the built one (without).
		{"ReconcileSeedWebhookConfig", func(ctx context.Context, c client.Client, mwc *admissionregistrationv1.MutatingWebhookConfiguration) error {
			if err := c.Create(ctx, mwc.DeepCopy()); err != nil {
				return err
			}
			return extensionswebhook.ReconcileSeedWebhookConfig(ctx, c, built(), "", []byte("ca"))
		}},
		// Gardener's CA rotation (webhook/certificates reconciler.go reconcileSourceWebhookConfig): a merge patch with
		// the optimistic lock.
		{"CA rotation", func(ctx context.Context, c client.Client, mwc *admissionregistrationv1.MutatingWebhookConfiguration) error {
			if err := c.Create(ctx, mwc.DeepCopy()); err != nil {
				return err
			}
			current := &admissionregistrationv1.MutatingWebhookConfiguration{}
			if err := c.Get(ctx, client.ObjectKeyFromObject(mwc), current); err != nil {
				return err
			}
			patch := client.MergeFromWithOptions(current.DeepCopy(), client.MergeFromWithOptimisticLock{})
			if err := extensionswebhook.OverwriteWebhooks(current, built()); err != nil {
				return err
			}
			if err := extensionswebhook.InjectCABundleIntoWebhookConfig(current, []byte("rotated")); err != nil {
				return err
			}
			return c.Patch(ctx, current, patch)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			stored := fake.NewClientBuilder().WithScheme(scheme.New()).Build()
			if err := tc.write(ctx, WithMatchConditions(stored), built()); err != nil {
				t.Fatal(err)
			}
			got := &admissionregistrationv1.MutatingWebhookConfiguration{}
			if err := stored.Get(ctx, client.ObjectKey{Name: "gardener-extension-cilium-selfhosted"}, got); err != nil {
				t.Fatal(err)
			}
			if len(got.Webhooks) != len(want) {
				t.Fatalf("%d webhooks stored, want %d", len(got.Webhooks), len(want))
			}
			for i, w := range got.Webhooks {
				if !slices.Equal(w.MatchConditions, want[i]) {
					t.Errorf("%s: matchConditions %v, want %v", w.Name, w.MatchConditions, want[i])
				}
			}
		})
	}
	// Other kinds pass as they are.
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: ConfigWebhookName + suffix}}
	if err := WithMatchConditions(fake.NewClientBuilder().WithScheme(scheme.New()).Build()).Create(context.Background(), cm); err != nil {
		t.Errorf("creating a ConfigMap: %v", err)
	}
}
