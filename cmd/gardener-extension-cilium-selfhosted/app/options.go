package app

import (
	"fmt"

	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"
	componentbaseconfigv1alpha1 "k8s.io/component-base/config/v1alpha1"

	extensionscmdcontroller "github.com/gardener/gardener/extensions/pkg/controller/cmd"
	extensionscmdwebhook "github.com/gardener/gardener/extensions/pkg/webhook/cmd"
	"github.com/gardener/gardener/pkg/client/kubernetes"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/controller/endpointsconfigmap"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/controller/managedresourceretry"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/controller/repin"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/controller/selfhostedshootexposure"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/exposure/health"
	"github.com/gardener/gardener-extension-cilium-selfhosted/webhook/apiserveraccess"
)

// ExtensionName names the extension: its MutatingWebhookConfiguration is gardener-extension-<ExtensionName>, its
// webhooks <webhook>.<ExtensionName>.extensions.gardener.cloud.
const ExtensionName = "cilium-selfhosted"

// SelfHostedOnly are the controllers and webhooks that only make sense inside a self-hosted shoot; they are switched
// off unless --self-hosted-shoot-cluster is set.
var (
	selfHostedOnlyControllers = []string{endpointsconfigmap.ControllerName, managedresourceretry.ControllerName, repin.ControllerName}
	selfHostedOnlyWebhooks    = apiserveraccess.WebhookNames
)

// ControllerSwitchOptions are the controllers of this extension, for --controllers / --disable-controllers.
func ControllerSwitchOptions() *extensionscmdcontroller.SwitchOptions {
	return extensionscmdcontroller.NewSwitchOptions(
		extensionscmdcontroller.Switch(endpointsconfigmap.ControllerName, endpointsconfigmap.AddToManager),
		extensionscmdcontroller.Switch(managedresourceretry.ControllerName, managedresourceretry.AddToManager),
		extensionscmdcontroller.Switch(repin.ControllerName, repin.AddToManager),
		extensionscmdcontroller.Switch(selfhostedshootexposure.ControllerName, selfhostedshootexposure.AddToManager),
	)
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
