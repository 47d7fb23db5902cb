package app

import (
	extensionscmdcontroller "github.com/gardener/gardener/extensions/pkg/controller/cmd"
	extensionscmdwebhook "github.com/gardener/gardener/extensions/pkg/webhook/cmd"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/controller/apiserverendpoints"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/controller/selfhostedshootexposure"
	"github.com/gardener/gardener-extension-cilium-selfhosted/webhook/apiserveraccess"
)

// ExtensionName names the extension: its MutatingWebhookConfiguration is gardener-extension-<ExtensionName>, its
// webhooks <webhook>.<ExtensionName>.extensions.gardener.cloud.
const ExtensionName = "cilium-selfhosted"

// SelfHostedOnly are the controllers and webhooks that only make sense inside a self-hosted shoot; they are switched
// off unless --self-hosted-shoot-cluster is set.
var (
	selfHostedOnlyControllers = []string{apiserverendpoints.ControllerName}
	selfHostedOnlyWebhooks    = apiserveraccess.WebhookNames
)

// ControllerSwitchOptions are the controllers of this extension, for --controllers / --disable-controllers.
func ControllerSwitchOptions() *extensionscmdcontroller.SwitchOptions {
	return extensionscmdcontroller.NewSwitchOptions(
		extensionscmdcontroller.Switch(apiserverendpoints.ControllerName, apiserverendpoints.AddToManager),
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
