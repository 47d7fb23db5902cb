// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package app

import (
	"context"
	"fmt"
	"os"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	componentbaseconfigv1alpha1 "k8s.io/component-base/config/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	extensionscmdwebhook "github.com/gardener/gardener/extensions/pkg/webhook/cmd"
	"github.com/gardener/gardener/pkg/client/kubernetes"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/apiserverfailover"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/controller/endpointsconfigmap"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/controller/l2handover"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/controller/managedresourceretry"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/controller/repin"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/controller/selfhostedshootexposure"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/controller/staleaddress"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/exposure/health"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/processmodel"
	"github.com/gardener/gardener-extension-cilium-selfhosted/webhook/apiserveraccess"
)

// ExtensionName names the extension: its MutatingWebhookConfiguration is gardener-extension-<ExtensionName>, its
// webhooks <webhook>.<ExtensionName>.extensions.gardener.cloud.
const ExtensionName = "cilium-selfhosted"

// SelfHostedOnly are the controllers and webhooks that only make sense inside a self-hosted shoot; they are switched
// off unless --self-hosted-shoot-cluster is set.
var (
	selfHostedOnlyControllers = []string{endpointsconfigmap.ControllerName, managedresourceretry.ControllerName, repin.ControllerName,
		l2handover.Name, staleaddress.Name, apiserverfailover.Name}
	selfHostedOnlyWebhooks = apiserveraccess.WebhookNames
)

// controllerList are the extension's controllers and where each runs (docs/development/process-model.md), for
// --controllers / --disable-controllers. Those of every replica read the options when they are added.
func (o *options) controllerList() []processmodel.Controller {
	return []processmodel.Controller{
		{Name: endpointsconfigmap.ControllerName, Where: processmodel.LeaderTerm, Add: endpointsconfigmap.AddToManager},
		{Name: managedresourceretry.ControllerName, Where: processmodel.LeaderTerm, Add: managedresourceretry.AddToManager},
		{Name: repin.ControllerName, Where: processmodel.LeaderTerm, Add: repin.AddToManager},
		{Name: selfhostedshootexposure.ControllerName, Where: processmodel.LeaderTerm, Add: selfhostedshootexposure.AddToManager},
		// The leader may run on the very node whose announcement is to be handed over.
		{Name: l2handover.Name, Where: processmodel.EveryReplica, Add: func(_ context.Context, mgr manager.Manager) error {
			return l2handover.AddToManager(mgr, o.handover.Options)
		}},
		// Each replica looks after its own pod.
		{Name: staleaddress.Name, Where: processmodel.EveryReplica, Add: func(_ context.Context, mgr manager.Manager) error {
			return staleaddress.AddToManager(mgr, o.pod.Pod)
		}},
		// Each process's own way to kube-apiserver.
		{Name: apiserverfailover.Name, Where: processmodel.EveryReplica, Add: func(_ context.Context, mgr manager.Manager) error {
			if o.failover == nil {
				return nil
			}
			return apiserverfailover.AddToManager(mgr, o.failover)
		}},
	}
}

// WebhookSwitchOptions are the webhooks of this extension, for --disable-webhooks.
func WebhookSwitchOptions() *extensionscmdwebhook.SwitchOptions {
	return extensionscmdwebhook.NewSwitchOptions(
		extensionscmdwebhook.Switch(apiserveraccess.AgentWebhookName, apiserveraccess.AddAgentWebhook),
		extensionscmdwebhook.Switch(apiserveraccess.OperatorWebhookName, apiserveraccess.AddOperatorWebhook),
		extensionscmdwebhook.Switch(apiserveraccess.ConfigWebhookName, apiserveraccess.AddConfigWebhook),
	)
}

// clientConnectionOptions set how fast the extension may talk to kube-apiserver. client-go's default (5 QPS, burst 10)
// is far too low for an exposure's dozen requests per reconciliation: it stretched a single reconciliation to more
// than a second and 100 exposures to two minutes (bench/results). The defaults are those Gardener gives its own
// extensions' clients; kube-apiserver's API priority and fairness still protects it.
type clientConnectionOptions struct {
	QPS   float32
	Burst int
}

const (
	kubeAPIQPSFlag   = "kube-api-qps"
	kubeAPIBurstFlag = "kube-api-burst"
)

func newClientConnectionOptions() *clientConnectionOptions {
	return &clientConnectionOptions{QPS: 100, Burst: 130}
}

// AddFlags implements extensionscmdcontroller.Flagger.
func (o *clientConnectionOptions) AddFlags(fs *pflag.FlagSet) {
	fs.Float32Var(&o.QPS, kubeAPIQPSFlag, o.QPS, "Queries per second the extension may send to kube-apiserver.")
	fs.IntVar(&o.Burst, kubeAPIBurstFlag, o.Burst, "Queries the extension may send to kube-apiserver in a burst above --"+kubeAPIQPSFlag+".")
}

// Complete implements extensionscmdcontroller.Completer.
func (o *clientConnectionOptions) Complete() error {
	if o.QPS <= 0 {
		return fmt.Errorf("--%s must be positive, got %v", kubeAPIQPSFlag, o.QPS)
	}
	if o.Burst < 1 {
		return fmt.Errorf("--%s must be at least 1, got %d", kubeAPIBurstFlag, o.Burst)
	}
	return nil
}

// apply sets the rate limits on the extension's REST config.
func (o *clientConnectionOptions) apply(config *rest.Config) {
	kubernetes.ApplyClientConnectionConfigurationToRESTConfig(&componentbaseconfigv1alpha1.ClientConnectionConfiguration{
		QPS: o.QPS, Burst: int32(o.Burst), ContentType: config.ContentType, AcceptContentTypes: config.AcceptContentTypes,
	}, config)
}

// probeOptions set how the exposure probes the kube-apiserver behind each of its endpoints (pkg/exposure/health).
type probeOptions struct {
	health.Settings
}

func newProbeOptions() *probeOptions {
	return &probeOptions{Settings: health.DefaultSettings}
}

// AddFlags implements extensionscmdcontroller.Flagger.
func (o *probeOptions) AddFlags(fs *pflag.FlagSet) {
	fs.DurationVar(&o.Interval, "endpoint-probe-interval", o.Interval,
		"How often the kube-apiserver behind each exposure endpoint is probed (GET /readyz); 0 switches probing off.")
	fs.DurationVar(&o.Timeout, "endpoint-probe-timeout", o.Timeout, "How long one probe may take.")
	fs.IntVar(&o.FailureThreshold, "endpoint-probe-failure-threshold", o.FailureThreshold,
		"Failed probes in a row after which an endpoint is published as not ready.")
	fs.IntVar(&o.SuccessThreshold, "endpoint-probe-success-threshold", o.SuccessThreshold,
		"Successful probes in a row after which a not-ready endpoint is published as ready again.")
	fs.StringVar(&o.ServiceAccount, "endpoint-probe-service-account", o.ServiceAccount,
		"namespace/name of the ServiceAccount whose short-lived tokens (TokenRequest) the probes carry; empty: the extension's own credentials.")
}

// Complete implements extensionscmdcontroller.Completer.
func (o *probeOptions) Complete() error {
	if err := o.Validate(); err != nil {
		return fmt.Errorf("--endpoint-probe-*: %w", err)
	}
	return nil
}

// handoverOptions set the handover of L2 announcement leases to the replica's own node (pkg/controller/l2handover).
type handoverOptions struct {
	l2handover.Options
}

func newHandoverOptions() *handoverOptions {
	return &handoverOptions{Options: l2handover.Options{Enabled: true, Probes: l2handover.DefaultProbes}}
}

// AddFlags implements extensionscmdcontroller.Flagger.
func (o *handoverOptions) AddFlags(fs *pflag.FlagSet) {
	fs.BoolVar(&o.Enabled, "l2-handover", o.Enabled,
		"Hand the L2 announcement lease of an exposure's VIP to this replica's node when the node holding it has no ready kube-apiserver and does not renew it.")
	fs.DurationVar(&o.Probes.Interval, "l2-handover-probe-interval", o.Probes.Interval, "How often the kube-apiserver of a lease holder is probed (GET /readyz).")
	fs.DurationVar(&o.Probes.Timeout, "l2-handover-probe-timeout", o.Probes.Timeout, "How long one probe of a lease holder's kube-apiserver may take.")
	fs.IntVar(&o.Probes.FailureThreshold, "l2-handover-probe-failure-threshold", o.Probes.FailureThreshold,
		"Failed probes in a row after which a lease holder's kube-apiserver counts as not ready.")
}

// Complete implements extensionscmdcontroller.Completer.
func (o *handoverOptions) Complete() error {
	if !o.Enabled {
		return nil
	}
	if err := o.Probes.Validate(); err != nil {
		return fmt.Errorf("--l2-handover-probe-*: %w", err)
	}
	return nil
}

// podOptions say which pod this replica runs in (the chart sets them from the downward API): the node it hands L2
// leases to (pkg/controller/l2handover), and the pod it replaces when the node's address changes
// (pkg/controller/staleaddress).
type podOptions struct {
	staleaddress.Pod
	uid string
}

func newPodOptions() *podOptions {
	return &podOptions{
		Pod: staleaddress.Pod{Name: os.Getenv("POD_NAME"), Namespace: os.Getenv("POD_NAMESPACE"), IP: os.Getenv("POD_IP"), Node: os.Getenv("NODE_NAME")},
		uid: os.Getenv("POD_UID"),
	}
}

// AddFlags implements extensionscmdcontroller.Flagger.
func (o *podOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Node, "node-name", o.Node, "The node this replica runs on (spec.nodeName; default $NODE_NAME): the only node it hands an L2 announcement lease to.")
	fs.StringVar(&o.Name, "pod-name", o.Name, "This replica's pod (default $POD_NAME), which it deletes once its node no longer has the pod's address.")
	fs.StringVar(&o.Namespace, "pod-namespace", o.Namespace, "The namespace of this replica's pod (default $POD_NAMESPACE).")
	fs.StringVar(&o.uid, "pod-uid", o.uid, "The UID of this replica's pod (default $POD_UID).")
	fs.StringVar(&o.IP, "pod-ip", o.IP, "The address of this replica's pod (status.podIP; default $POD_IP).")
}

// Complete implements extensionscmdcontroller.Completer.
func (o *podOptions) Complete() error {
	o.UID = types.UID(o.uid)
	return nil
}
