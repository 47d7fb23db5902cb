// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

// Package app is the command of gardener-extension-cilium-selfhosted, assembled from Gardener's extension option
// aggregators so that it takes the flags every Gardener extension takes.
package app

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/netip"
	"net/url"
	"os"
	"slices"

	"github.com/spf13/cobra"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"
	"k8s.io/component-base/version"
	"k8s.io/component-base/version/verflag"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	extensionscontroller "github.com/gardener/gardener/extensions/pkg/controller"
	extensionscmdcontroller "github.com/gardener/gardener/extensions/pkg/controller/cmd"
	extensionscmdwebhook "github.com/gardener/gardener/extensions/pkg/webhook/cmd"
	gardenerhealthz "github.com/gardener/gardener/pkg/healthz"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/apiserverendpoints"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/apiserverfailover"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/cilium"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/controller/selfhostedshootexposure"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/controller/staleaddress"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/processmodel"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/scheme"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/webhookserver"
)

// options are the command's options, grouped the Gardener way.
type options struct {
	rest             *extensionscmdcontroller.RESTOptions
	clientConnection *clientConnectionOptions
	manager          *extensionscmdcontroller.ManagerOptions
	general          *extensionscmdcontroller.GeneralOptions
	reconcile        *extensionscmdcontroller.ReconcilerOptions
	exposureCtrl     *extensionscmdcontroller.ControllerOptions
	probes           *probeOptions
	handover         *handoverOptions
	pod              *podOptions
	controllers      *extensionscmdcontroller.SwitchOptions
	// failover is the process's dialer to kube-apiserver on a self-hosted shoot's control-plane node, nil elsewhere.
	failover         *apiserverfailover.Dialer
	webhooks         *extensionscmdwebhook.AddToManagerOptions
	optionAggregator extensionscmdcontroller.OptionAggregator

	// registeringWebhookServer is where Gardener's wiring registers the webhooks, which the manager's webhook server
	// serves through webhookLimits (webhookserver.Servers).
	registeringWebhookServer webhook.Server
}

func newOptions() *options {
	o := &options{
		rest:             &extensionscmdcontroller.RESTOptions{},
		clientConnection: newClientConnectionOptions(),
		manager: &extensionscmdcontroller.ManagerOptions{
			LeaderElection:          true,
			LeaderElectionID:        extensionscmdcontroller.LeaderElectionNameID(ExtensionName),
			LeaderElectionNamespace: os.Getenv("LEADER_ELECTION_NAMESPACE"),
			WebhookServerPort:       443,
			WebhookCertDir:          "/tmp/gardener-extensions-cert",
		},
		general:      &extensionscmdcontroller.GeneralOptions{},
		reconcile:    &extensionscmdcontroller.ReconcilerOptions{},
		exposureCtrl: &extensionscmdcontroller.ControllerOptions{MaxConcurrentReconciles: 5},
		probes:       newProbeOptions(),
		handover:     newHandoverOptions(),
		pod:          newPodOptions(),
	}
	o.controllers = processmodel.Switches(o.controllerList())
	// No shoot webhooks are delivered as a ManagedResource: on a self-hosted shoot the framework merges them into the
	// MutatingWebhookConfiguration it reconciles itself (--self-hosted-shoot-cluster). NewAddToManagerOptions copies
	// the server and switch options: from here on only o.webhooks.Server and o.webhooks.Switch count.
	o.webhooks = extensionscmdwebhook.NewAddToManagerOptions(ExtensionName, "", nil, o.general,
		&extensionscmdwebhook.ServerOptions{Namespace: os.Getenv("WEBHOOK_CONFIG_NAMESPACE")}, WebhookSwitchOptions())
	o.optionAggregator = extensionscmdcontroller.NewOptionAggregator(
		o.clientConnection, // before rest, so that a bad limit is reported even when no kubeconfig is found
		o.rest,
		o.manager,
		o.general,
		o.reconcile,
		extensionscmdcontroller.PrefixOption("selfhostedshootexposure-", o.exposureCtrl),
		o.probes,
		o.handover,
		o.pod,
		o.controllers,
		o.webhooks,
	)
	return o
}

// complete switches off what only makes sense in a self-hosted shoot unless --self-hosted-shoot-cluster is set, and
// completes the options.
func (o *options) complete() error {
	if !o.general.SelfHostedShootCluster {
		o.controllers.Disabled = append(o.controllers.Disabled, selfHostedOnlyControllers...)
		o.webhooks.Switch.Disabled = append(o.webhooks.Switch.Disabled, selfHostedOnlyWebhooks...)
	}
	if err := o.optionAggregator.Complete(); err != nil {
		return fmt.Errorf("error completing options: %w", err)
	}
	o.clientConnection.apply(o.rest.Completed().Config)
	o.exposureCtrl.Completed().Apply(&selfhostedshootexposure.DefaultAddOptions.Controller)
	selfhostedshootexposure.DefaultAddOptions.IgnoreOperationAnnotation = o.reconcile.Completed().IgnoreOperationAnnotation
	selfhostedshootexposure.DefaultAddOptions.Probes = o.probes.Settings
	selfhostedshootexposure.DefaultAddOptions.ExtensionClasses = slices.Clone(o.general.Completed().ExtensionClasses)
	o.handover.Type, o.handover.Node = selfhostedshootexposure.Type, o.pod.Node
	o.handover.Probes.ServiceAccount = o.probes.ServiceAccount
	// Only a self-hosted shoot's control-plane nodes announce its kube-apiserver.
	o.handover.Enabled = o.handover.Enabled && o.general.SelfHostedShootCluster
	return nil
}

// NewCommand returns the command that runs the extension's controllers and webhooks.
func NewCommand(ctx context.Context) *cobra.Command {
	o := newOptions()
	cmd := &cobra.Command{
		Use:           "gardener-extension-" + ExtensionName,
		Short:         "Makes Cilium safe and useful on Gardener self-hosted shoots",
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if printVersion(cmd) {
				return nil
			}
			if err := o.complete(); err != nil {
				return err
			}
			v := version.Get()
			ctrl.Log.Info("Starting "+cmd.Use, "version", v.GitVersion, "commit", v.GitCommit, "treeState", v.GitTreeState)
			return o.run(ctx)
		},
	}
	o.optionAggregator.AddFlags(cmd.Flags())
	verflag.AddFlags(cmd.Flags())
	return cmd
}

// printVersion answers --version as Gardener's components do (k8s.io/component-base/version/verflag), with the
// commit, the tree state and the build date beside the version (hack/build.sh sets them); --version=raw prints all of
// version.Get().
func printVersion(cmd *cobra.Command) bool {
	if cmd.Flags().Lookup("version").Value.String() != "true" {
		verflag.PrintAndExitIfRequested()
		return false
	}
	v := version.Get()
	fmt.Fprintf(cmd.OutOrStdout(), "%s %s (commit %s, tree %s, built %s)\n", cmd.Use, v.GitVersion, v.GitCommit, v.GitTreeState, v.BuildDate)
	return true
}

func (o *options) run(ctx context.Context) error {
	options := o.manager.Completed().Options()
	options.Scheme = scheme.New()
	options.Cache.ByObject = cacheScope(o.webhooks.Server.Completed().Namespace)
	// Nothing reads managed fields from the cache; with every Cilium pod of a large cluster cached, they would be much
	// of the heap.
	options.Cache.DefaultTransform = cache.TransformStripManagedFields()
	// Its one MutatingWebhookConfiguration is read by name, so that RBAC can name it rather than grant list and watch
	// on all of them.
	options.Client.Cache = &client.CacheOptions{DisableFor: []client.Object{&admissionregistrationv1.MutatingWebhookConfiguration{}}}
	if server, ok := options.WebhookServer.(*webhook.DefaultServer); ok {
		server.Options.TLSOpts = append(server.Options.TLSOpts, serverTLS)
		servers := webhookserver.New(server.Options, webhookLimits)
		options.WebhookServer, o.registeringWebhookServer = servers.Serving, servers.Registering
	}
	// Metrics only over TLS and only for callers whom kube-apiserver authenticates and authorizes for /metrics: in the
	// host network of a self-hosted shoot the port is reachable from the node's network.
	options.Metrics.SecureServing = true
	options.Metrics.FilterProvider = filters.WithAuthenticationAndAuthorization
	options.Metrics.TLSOpts = append(options.Metrics.TLSOpts, serverTLS)
	// A replica that stops hands its controllers over at once instead of after the lease duration.
	options.LeaderElectionReleaseOnCancel = true
	// The process's manager never campaigns: it serves the webhooks in every replica, leader or not, and through a lost
	// lease; the controllers run in leader terms (leaderTerms).
	processOptions := options
	processOptions.LeaderElection = false
	config := o.rest.Completed().Config
	if processmodel.Enabled(o.controllers, apiserverfailover.Name) {
		o.failover = failoverDialer(config, o.general.SelfHostedShootCluster, o.pod.IP)
	}
	if o.general.SelfHostedShootCluster && processmodel.Enabled(o.controllers, staleaddress.Name) {
		writer, err := client.New(config, client.Options{})
		if err != nil {
			return err
		}
		if err := staleaddress.ReplaceIfStale(ctx, writer, o.pod.Pod, ctrl.Log.WithName(staleaddress.Name)); err != nil {
			return err
		}
	}
	mgr, err := manager.New(config, processOptions)
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

	if err := o.addWebhooks(ctx, mgr); err != nil {
		return fmt.Errorf("could not add webhooks to manager: %w", err)
	}
	if err := o.controllers.Completed().AddToManager(ctx, processmodel.InEveryReplica(mgr)); err != nil {
		return fmt.Errorf("could not add the controllers of every replica: %w", err)
	}
	terms, err := o.leaderTerms(ctx, config, mgr, options)
	if err != nil {
		return err
	}
	if err := mgr.Add(terms); err != nil {
		return err
	}
	return mgr.Start(ctx)
}

// failoverDialer makes config fall back to the other control-plane nodes' kube-apiservers when its own node's, at
// localhost, cannot be reached (pkg/apiserverfailover), and returns the Dialer to keep their addresses in; nil when the
// extension does not run on a self-hosted shoot's control-plane node or is given another kube-apiserver.
func failoverDialer(config *rest.Config, selfHosted bool, podIP string) *apiserverfailover.Dialer {
	u, err := url.Parse(config.Host)
	if !selfHosted || config.Dial != nil || err != nil || u.Hostname() != "localhost" {
		return nil
	}
	self, _ := netip.ParseAddr(podIP) // a hostNetwork pod's address is its node's
	d := apiserverfailover.New(self, ctrl.Log.WithName(apiserverfailover.Name))
	config.Dial = d.DialContext
	return d
}

// serverTLS sets what the webhook and metrics servers accept: TLS 1.2 or newer (Go's default minimum too; stated, so
// that it holds whatever the toolchain defaults to) and HTTP/1.1 only, which keeps HTTP/2's stream-reset and
// rapid-reset attacks (CVE-2023-44487, CVE-2023-39325) away from the host network.
func serverTLS(c *tls.Config) {
	c.MinVersion = tls.VersionTLS12
	c.NextProtos = []string{"http/1.1"}
}

// cacheScope keeps the informers of namespaced kinds to the namespaces the extension works in, so that its RBAC can
// stay namespaced: Cilium's objects and the exposure's Service and slices live in kube-system, the webhook's
// certificates in the extension's own namespace. Nothing else of those kinds is read.
func cacheScope(webhookNamespace string) map[client.Object]cache.ByObject {
	kubeSystem := cache.ByObject{Namespaces: map[string]cache.Config{cilium.Namespace: {}}}
	scope := map[client.Object]cache.ByObject{
		// The one ConfigMap watched is the endpoints ConfigMap: RBAC lets a list and watch by its name through
		// (resourceNames with a metadata.name field selector) and no other ConfigMap of kube-system is read from the
		// cache (cilium-config is read by name when an exposure is reconciled).
		&corev1.ConfigMap{}: {Namespaces: map[string]cache.Config{cilium.Namespace: {
			FieldSelector: fields.OneTermEqualSelector("metadata.name", apiserverendpoints.ConfigMapName),
		}}},
		&corev1.Service{}: kubeSystem,
		// Cilium's L2 announcement leases, which the handover watches (pkg/controller/l2handover).
		&coordinationv1.Lease{}:      kubeSystem,
		&discoveryv1.EndpointSlice{}: kubeSystem,
		&appsv1.DaemonSet{}:          kubeSystem,
		// Only Cilium's pods are read (re-pinning); a large cluster has thousands of them and as many others.
		&corev1.Pod{}: {Namespaces: map[string]cache.Config{cilium.Namespace: {
			LabelSelector: labels.SelectorFromSet(labels.Set{cilium.LabelKeyPartOf: cilium.LabelValuePartOf}),
		}}},
	}
	if webhookNamespace != "" {
		scope[&corev1.Secret{}] = cache.ByObject{Namespaces: map[string]cache.Config{webhookNamespace: {}}}
	}
	return scope
}
