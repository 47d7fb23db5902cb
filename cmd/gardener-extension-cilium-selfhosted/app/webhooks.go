// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package app

import (
	"context"
	"fmt"
	"os"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/processmodel"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/webhookserver"
	"github.com/gardener/gardener-extension-cilium-selfhosted/webhook/apiserveraccess"
)

// addWebhooks wires the webhooks into the process's manager, which serves them in every replica whether it leads or
// not; the leader's half of Gardener's wiring goes to each term (addLeaderWebhookParts, pkg/processmodel). With
// unmanaged certificates (no --webhook-config-namespace, for development) the certificates are generated when the
// wiring runs, so it runs once, in the process's manager, and each replica registers its own CA.
func (o *options) addWebhooks(ctx context.Context, mgr manager.Manager) error {
	mgr = withMatchConditions{Manager: mgr}
	if o.registeringWebhookServer != nil {
		mgr = withWebhookServer{Manager: mgr, server: o.registeringWebhookServer}
	}
	if o.unmanagedWebhookCertificates() {
		_, err := o.webhooks.Completed().AddToManager(ctx, mgr, nil)
		return err
	}
	_, err := o.webhooks.Completed().AddToManager(ctx, processmodel.EveryReplicaWebhooks(mgr), nil)
	return err
}

// addLeaderWebhookParts adds the leader's half of Gardener's webhook wiring to a term. The wiring registers the
// handlers again, on a server of the term's that never starts, and writes the server certificate into its directory,
// a folder of its own in the process's certificate directory (the container's one writable place there) that is
// dropped right away.
func (o *options) addLeaderWebhookParts(ctx context.Context, process, term manager.Manager) error {
	if o.unmanagedWebhookCertificates() {
		return nil
	}
	server, ok := process.GetWebhookServer().(*webhook.DefaultServer)
	if !ok {
		return fmt.Errorf("expected *webhook.DefaultServer, got %T", process.GetWebhookServer())
	}
	certDir, err := os.MkdirTemp(server.Options.CertDir, ".leader-term-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(certDir)
	unserved := webhook.NewServer(webhook.Options{CertDir: certDir})
	_, err = o.webhooks.Completed().AddToManager(ctx, processmodel.LeaderWebhooks(withMatchConditions{Manager: term}, unserved), nil)
	return err
}

func (o *options) unmanagedWebhookCertificates() bool {
	return o.webhooks.Server.Completed().Namespace == ""
}

// leaderTerms runs the controllers and the leader's half of the webhook wiring in leader terms (pkg/processmodel), so
// that a lost lease never stops the webhook server.
func (o *options) leaderTerms(ctx context.Context, config *rest.Config, process manager.Manager, options manager.Options) (*processmodel.Terms, error) {
	var lock processmodel.Lock
	if options.LeaderElection {
		var err error
		if lock, err = processmodel.NewLock(config, process, options); err != nil {
			return nil, fmt.Errorf("could not create the leader lock: %w", err)
		}
	}
	return &processmodel.Terms{
		Config: config, Process: process, Lock: lock, Options: options,
		Log: process.GetLogger().WithName("leadership"),
		Fill: func(term manager.Manager) error {
			if err := o.addLeaderWebhookParts(ctx, process, term); err != nil {
				return fmt.Errorf("could not add the leader's webhook parts: %w", err)
			}
			if err := o.controllers.Completed().AddToManager(ctx, term); err != nil {
				return fmt.Errorf("could not add controllers: %w", err)
			}
			return nil
		},
	}, nil
}

// webhookLimits hold every caller of the webhook server to what kube-apiserver needs of it: a call is over after the
// webhooks' timeout on kube-apiserver's side, so reading a body, or waiting for a slot, longer than that serves no one.
// Eight requests at once, each buffering at most 7 MiB, keep a flood from the node network within the chart's memory
// limit (make bench, section 2); kube-apiserver's calls are answered in milliseconds.
var webhookLimits = webhookserver.Limits{
	ReadTimeout:   time.Duration(apiserveraccess.TimeoutSeconds) * time.Second,
	HandleTimeout: time.Duration(apiserveraccess.TimeoutSeconds) * time.Second,
	InFlight:      8,
}

// withMatchConditions is a manager whose client writes the webhooks' match conditions into the
// MutatingWebhookConfiguration that Gardener's wiring registers with it (apiserveraccess.WithMatchConditions).
type withMatchConditions struct{ manager.Manager }

func (m withMatchConditions) GetClient() client.Client {
	return apiserveraccess.WithMatchConditions(m.Manager.GetClient())
}

// withWebhookServer is a manager whose webhook server is server, for Gardener's wiring, which registers its handlers
// through GetWebhookServer: the registering half of webhookserver.Servers, whose serving half the manager runs.
type withWebhookServer struct {
	manager.Manager
	server webhook.Server
}

func (m withWebhookServer) GetWebhookServer() webhook.Server { return m.server }
