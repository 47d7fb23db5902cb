// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package apiserveraccess

import (
	"context"
	"slices"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/cilium"
)

// MatchConditions are the match conditions of this package's webhooks by name: the config webhook's singles out
// `cilium-config`, which no object selector can (Cilium's chart gives it no labels), so that kube-apiserver sends the
// extension no other ConfigMap of kube-system. The chart's -confine-webhook-configuration policy pins them.
var MatchConditions = map[string][]admissionregistrationv1.MatchCondition{
	ConfigWebhookName: {{Name: cilium.ConfigMapName, Expression: "object.metadata.name == '" + cilium.ConfigMapName + "'"}},
}

// WithMatchConditions is c, except that every MutatingWebhookConfiguration it creates, updates or patches carries
// MatchConditions in this package's webhooks. Gardener's webhook framework has no field for them
// (extensions/pkg/webhook Webhook) and writes the configuration it builds with the manager's client
// (ReconcileSeedWebhookConfig at start, the CA bundle in webhook/certificates reconciler.go). A patch of it becomes an
// update of the whole object at the resourceVersion it was read at: Gardener computes a patch before it sends it
// (pkg/controllerutils getAndCreateOrPatch), too early for conditions added here, and both writers send the whole
// object they read and changed, and retry a conflict.
func WithMatchConditions(c client.Client) client.Client { return matchConditionsClient{Client: c} }

type matchConditionsClient struct{ client.Client }

func (c matchConditionsClient) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	setMatchConditions(obj)
	return c.Client.Create(ctx, obj, opts...)
}

func (c matchConditionsClient) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	setMatchConditions(obj)
	return c.Client.Update(ctx, obj, opts...)
}

func (c matchConditionsClient) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	if !setMatchConditions(obj) {
		return c.Client.Patch(ctx, obj, patch, opts...)
	}
	p := (&client.PatchOptions{}).ApplyOptions(opts)
	return c.Client.Update(ctx, obj, &client.UpdateOptions{DryRun: p.DryRun, FieldManager: p.FieldManager})
}

// setMatchConditions gives each of this package's webhooks in obj, if it is a MutatingWebhookConfiguration, its match
// conditions (none for those without), and says whether there was any. Gardener names a webhook
// <name>.<extension>.extensions.gardener.cloud (extensions/pkg/webhook registration.go BuildWebhookConfigs).
func setMatchConditions(obj client.Object) bool {
	mwc, ok := obj.(*admissionregistrationv1.MutatingWebhookConfiguration)
	if !ok {
		return false
	}
	ours := false
	for i, w := range mwc.Webhooks {
		if name, _, _ := strings.Cut(w.Name, "."); strings.HasSuffix(w.Name, ".extensions.gardener.cloud") && slices.Contains(WebhookNames, name) {
			mwc.Webhooks[i].MatchConditions = slices.Clone(MatchConditions[name])
			ours = true
		}
	}
	return ours
}
