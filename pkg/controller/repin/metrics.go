// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package repin

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// The re-pinning's metrics. Registered once for the process.
var (
	pinnings = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "cilium_selfhosted_cilium_pods",
		Help: "Cilium's agent, Envoy and operator pods by how they reach kube-apiserver compared with the current control-plane members (current, stranded, degraded, unpinned, misplaced).",
	}, []string{"pinning"})
	recreated = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cilium_selfhosted_stale_pods_recreated_total",
		Help: "Cilium pods the extension deleted for their controller to recreate them pinned to the current control-plane members, by their pinning.",
	}, []string{"pinning"})
)

func init() {
	metrics.Registry.MustRegister(pinnings, recreated)
}

// observe sets the gauge of every pinning, zero for those no pod has.
func observe[T any](byPinning map[Pinning][]T) {
	for _, p := range Pinnings {
		pinnings.WithLabelValues(string(p)).Set(float64(len(byPinning[p])))
	}
}
