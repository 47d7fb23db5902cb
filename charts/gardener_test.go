// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package charts_test

import (
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	resourcesv1alpha1 "github.com/gardener/gardener/pkg/apis/resources/v1alpha1"

	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/fixtures"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/testenv"
)

// TestGardenersRendererKeepsEveryObject: gardenlet renders the chart with Gardener's chart renderer and stores one
// secret key per manifest, named after file, kind and name; two objects that share them (e.g. equally named Roles in
// two namespaces in one file) would lose one. Every object the Helm SDK renders must arrive in the ManagedResource.
func TestGardenersRendererKeepsEveryObject(t *testing.T) {
	rendered, err := testenv.RenderChart(fixtures.Shoot(true))
	if err != nil {
		t.Fatal(err)
	}
	objs := render(t, selfHostedValues(t, fixtures.Shoot(true)))
	if got := len(rendered.AsSecretData()); got != len(objs) {
		t.Errorf("Gardener's chart renderer keeps %d manifests of %d objects", got, len(objs))
	}
}

// TestWebhookConfigurationLeftToTheExtension: on a self-hosted shoot the chart creates the extension's
// MutatingWebhookConfiguration without webhooks, marked so that Gardener's resource manager only creates it and
// leaves the extension's webhooks in place; elsewhere the chart has none.
func TestWebhookConfigurationLeftToTheExtension(t *testing.T) {
	if mwcs := find[*admissionregistrationv1.MutatingWebhookConfiguration](render(t, nil)); len(mwcs) != 0 {
		t.Errorf("%d MutatingWebhookConfigurations outside a self-hosted shoot", len(mwcs))
	}
	mwcs := find[*admissionregistrationv1.MutatingWebhookConfiguration](render(t, selfHostedValues(t, fixtures.Shoot(true))))
	if len(mwcs) != 1 {
		t.Fatalf("%d MutatingWebhookConfigurations, want the extension's", len(mwcs))
	}
	if mwc := mwcs[0]; mwc.Name != testenv.WebhookConfigName || mwc.Annotations[resourcesv1alpha1.Ignore] != "true" || len(mwc.Webhooks) != 0 {
		t.Errorf("MutatingWebhookConfiguration %s, annotations %v, %d webhooks; want %s, %s=true, none",
			mwc.Name, mwc.Annotations, len(mwc.Webhooks), testenv.WebhookConfigName, resourcesv1alpha1.Ignore)
	}
}
