// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package managedresourceretry

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// retries counts the reconciles requested per ManagedResource (namespace/name). Registered once for the process.
var retries = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "cilium_selfhosted_managedresource_reconciles_requested_total",
	Help: "Reconciles the extension requested of a ManagedResource whose apply the keep-pinned admission policies refused.",
}, []string{"managedresource"})

func init() {
	metrics.Registry.MustRegister(retries)
}
