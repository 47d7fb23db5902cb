// Package app is the command of gardener-extension-cilium-selfhosted, assembled from Gardener's extension option
// aggregators so that it takes the flags every Gardener extension takes.
package app

import (
	"context"
	"fmt"
	"os"
	"slices"

	"github.com/spf13/cobra"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	extensionscontroller "github.com/gardener/gardener/extensions/pkg/controller"
	extensionscmdcontroller "github.com/gardener/gardener/extensions/pkg/controller/cmd"
	extensionscmdwebhook "github.com/gardener/gardener/extensions/pkg/webhook/cmd"
	gardenerhealthz "github.com/gardener/gardener/pkg/healthz"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/controller/selfhostedshootexposure"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/scheme"
)

// NewCommand returns the command that runs the extension's controllers and webhooks.
func NewCommand(ctx context.Context) *cobra.Command {
	var (
		restOpts = &extensionscmdcontroller.RESTOptions{}
		mgrOpts  = &extensionscmdcontroller.ManagerOptions{
			LeaderElection:          true,
			LeaderElectionID:        extensionscmdcontroller.LeaderElectionNameID(ExtensionName),
			LeaderElectionNamespace: os.Getenv("LEADER_ELECTION_NAMESPACE"),
			WebhookServerPort:       443,
			WebhookCertDir:          "/tmp/gardener-extensions-cert",
		}
		generalOpts      = &extensionscmdcontroller.GeneralOptions{}
		reconcileOpts    = &extensionscmdcontroller.ReconcilerOptions{}
		exposureCtrlOpts = &extensionscmdcontroller.ControllerOptions{MaxConcurrentReconciles: 5}

		controllerSwitches   = ControllerSwitchOptions()
		webhookSwitches      = WebhookSwitchOptions()
		webhookServerOptions = &extensionscmdwebhook.ServerOptions{Namespace: os.Getenv("WEBHOOK_CONFIG_NAMESPACE")}
		// No shoot webhooks are delivered as a ManagedResource: on a self-hosted shoot the framework merges them into
		// the MutatingWebhookConfiguration it reconciles itself (--self-hosted-shoot-cluster).
		webhookOptions = extensionscmdwebhook.NewAddToManagerOptions(ExtensionName, "", nil, generalOpts, webhookServerOptions, webhookSwitches)

		aggOption = extensionscmdcontroller.NewOptionAggregator(
			restOpts,
			mgrOpts,
			generalOpts,
			reconcileOpts,
			extensionscmdcontroller.PrefixOption("selfhostedshootexposure-", exposureCtrlOpts),
			controllerSwitches,
			webhookOptions,
		)
	)

	cmd := &cobra.Command{
		Use:           "gardener-extension-" + ExtensionName,
		Short:         "Makes Cilium safe and useful on Gardener self-hosted shoots",
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(_ *cobra.Command, _ []string) error {
			if !generalOpts.SelfHostedShootCluster {
				controllerSwitches.Disabled = append(controllerSwitches.Disabled, selfHostedOnlyControllers...)
				webhookSwitches.Disabled = append(webhookSwitches.Disabled, selfHostedOnlyWebhooks...)
			}
			if err := aggOption.Complete(); err != nil {
				return fmt.Errorf("error completing options: %w", err)
			}
			exposureCtrlOpts.Completed().Apply(&selfhostedshootexposure.DefaultAddOptions.Controller)
			selfhostedshootexposure.DefaultAddOptions.IgnoreOperationAnnotation = reconcileOpts.Completed().IgnoreOperationAnnotation
			selfhostedshootexposure.DefaultAddOptions.ExtensionClasses = slices.Clone(generalOpts.Completed().ExtensionClasses)
			return run(ctx, restOpts, mgrOpts, controllerSwitches, webhookOptions)
		},
	}
	aggOption.AddFlags(cmd.Flags())
	return cmd
}

func run(
	ctx context.Context,
	restOpts *extensionscmdcontroller.RESTOptions,
	mgrOpts *extensionscmdcontroller.ManagerOptions,
	controllerSwitches *extensionscmdcontroller.SwitchOptions,
	webhookOptions *extensionscmdwebhook.AddToManagerOptions,
) error {
	options := mgrOpts.Completed().Options()
	options.Scheme = scheme.New()
	mgr, err := manager.New(restOpts.Completed().Config, options)
	if err != nil {
		return fmt.Errorf("could not instantiate manager: %w", err)
	}
	if err := extensionscontroller.AddToScheme(mgr.GetScheme()); err != nil {
		return fmt.Errorf("could not update manager scheme: %w", err)
	}

	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return fmt.Errorf("could not add healthcheck: %w", err)
	}
	if err := mgr.AddHealthzCheck("informer-sync", gardenerhealthz.NewCacheSyncHealthzWithDeadline(mgr.GetLogger(), clock.RealClock{}, mgr.GetCache(), gardenerhealthz.DefaultCacheSyncDeadline)); err != nil {
		return fmt.Errorf("could not add healthcheck: %w", err)
	}
	if err := mgr.AddReadyzCheck("informer-sync", gardenerhealthz.NewCacheSyncHealthz(mgr.GetCache())); err != nil {
		return fmt.Errorf("could not add readycheck for informers: %w", err)
	}
	if err := mgr.AddReadyzCheck("webhook-server", mgr.GetWebhookServer().StartedChecker()); err != nil {
		return fmt.Errorf("could not add readycheck of webhook to manager: %w", err)
	}

	if _, err := webhookOptions.Completed().AddToManager(ctx, mgr, nil); err != nil {
		return fmt.Errorf("could not add webhooks to manager: %w", err)
	}
	if err := controllerSwitches.Completed().AddToManager(ctx, mgr); err != nil {
		return fmt.Errorf("could not add controllers to manager: %w", err)
	}
	return mgr.Start(ctx)
}
