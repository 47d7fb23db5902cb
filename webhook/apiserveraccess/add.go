// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

// Package apiserveraccess is the admission webhook that keeps Cilium on a self-hosted shoot from depending on itself to
// reach kube-apiserver: Cilium pods on control-plane nodes use https://localhost:443, all others the control-plane
// nodes' InternalIPs, never the `kubernetes` ClusterIP, the exposure VIP or the external domain.
package apiserveraccess

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	extensionswebhook "github.com/gardener/gardener/extensions/pkg/webhook"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/cilium"
)

// Names of the webhooks, which are also their switches (--disable-webhooks) and their paths.
const (
	// AgentWebhookName intercepts the agent and Envoy DaemonSets and their pods.
	AgentWebhookName = "cilium-agent"
	// OperatorWebhookName intercepts the operator Deployment and its pods.
	OperatorWebhookName = "cilium-operator"
	// ConfigWebhookName intercepts the `cilium-config` ConfigMap.
	ConfigWebhookName = "cilium-config"
)

// WebhookNames are all webhooks of this package.
var WebhookNames = []string{AgentWebhookName, OperatorWebhookName, ConfigWebhookName}

// TimeoutSeconds keeps a slow or unreachable webhook from holding up Cilium's rollout for long: kube-apiserver gives up
// on a call after it.
const TimeoutSeconds int32 = 5

// AddAgentWebhook adds the webhook for the agent and Envoy DaemonSets and their pods.
func AddAgentWebhook(mgr manager.Manager) (*extensionswebhook.Webhook, error) {
	return newWebhook(mgr, AgentWebhookName,
		&metav1.LabelSelectorRequirement{Key: cilium.LabelKeyApp, Operator: metav1.LabelSelectorOpIn, Values: []string{cilium.LabelValueAgent, cilium.LabelValueEnvoy}},
		&appsv1.DaemonSet{}, &corev1.Pod{})
}

// AddOperatorWebhook adds the webhook for the operator Deployment and its pods.
func AddOperatorWebhook(mgr manager.Manager) (*extensionswebhook.Webhook, error) {
	return newWebhook(mgr, OperatorWebhookName,
		&metav1.LabelSelectorRequirement{Key: cilium.LabelKeyOperator, Operator: metav1.LabelSelectorOpIn, Values: []string{cilium.LabelValueOperator}},
		&appsv1.Deployment{}, &corev1.Pod{})
}

// AddConfigWebhook adds the webhook for the `cilium-config` ConfigMap. Cilium's chart gives that ConfigMap no labels,
// so no object selector can single it out: its match condition does (MatchConditions), and the mutator picks it by
// name as well.
func AddConfigWebhook(mgr manager.Manager) (*extensionswebhook.Webhook, error) {
	return newWebhook(mgr, ConfigWebhookName, nil, &corev1.ConfigMap{})
}

// newWebhook builds one shoot webhook; the framework merges it into the MutatingWebhookConfiguration that the
// extension reconciles at start when --self-hosted-shoot-cluster is set (webhook.BuildWebhookConfigs).
//
// failurePolicy Ignore: on a self-hosted shoot the webhook server may be unreachable (before the pod network exists,
// while the extension restarts) and kube-apiserver must then still admit Cilium, or the cluster could never bring up its
// network. What this costs is covered: templates reference the endpoints ConfigMap, so pods admitted without the
// webhook still avoid the VIP; a template admitted without it is corrected on its next apply.
// The framework has no field for reinvocationPolicy, so it stays at the API default (Never).
func newWebhook(mgr manager.Manager, name string, selector *metav1.LabelSelectorRequirement, objs ...client.Object) (*extensionswebhook.Webhook, error) {
	types := make([]extensionswebhook.Type, 0, len(objs))
	for _, obj := range objs {
		types = append(types, extensionswebhook.Type{Obj: obj})
	}
	h, err := newHandler(mgr, name, NewMutator(mgr.GetClient()), objs...)
	if err != nil {
		return nil, err
	}
	wh := &extensionswebhook.Webhook{
		Name:    name,
		Path:    name,
		Target:  extensionswebhook.TargetShoot,
		Types:   types,
		Webhook: &admission.Webhook{Handler: h, RecoverPanic: new(true)},
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{
			corev1.LabelMetadataName: cilium.Namespace,
		}},
		FailurePolicy:  new(admissionregistrationv1.Ignore),
		TimeoutSeconds: new(TimeoutSeconds),
	}
	if selector != nil {
		wh.ObjectSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{*selector}}
	}
	return wh, nil
}
