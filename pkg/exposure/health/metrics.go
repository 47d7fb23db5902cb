// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package health

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// The probers' metrics, per registry purpose (PurposeEndpoints, PurposeL2Handover) and endpoint address (host:port).
// Registered once for the process, with controller-runtime's registry, which the extension serves on /metrics.
var (
	probeDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "cilium_selfhosted_apiserver_probe_duration_seconds",
		Help:    "Duration of the probes (GET /readyz) of the kube-apiserver behind an exposure endpoint, failed ones included.",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1},
	}, []string{"purpose", "endpoint"})
	endpointReady = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "cilium_selfhosted_apiserver_endpoint_ready",
		Help: "1 while the probes count the kube-apiserver behind an exposure endpoint as ready, 0 while they take it out.",
	}, []string{"purpose", "endpoint"})
	endpointTransitions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cilium_selfhosted_apiserver_endpoint_transitions_total",
		Help: "Changes of an exposure endpoint between ready and not ready, by the state changed to.",
	}, []string{"purpose", "endpoint", "to"})
)

func init() {
	metrics.Registry.MustRegister(probeDuration, endpointReady, endpointTransitions)
}

func observeProbe(purpose, address string, d time.Duration) {
	probeDuration.WithLabelValues(purpose, address).Observe(d.Seconds())
}

func setReady(purpose, address string, ready bool) {
	v := 0.0
	if ready {
		v = 1
	}
	endpointReady.WithLabelValues(purpose, address).Set(v)
}

func transition(purpose, address string, ready bool) {
	setReady(purpose, address, ready)
	to := "not-ready"
	if ready {
		to = "ready"
	}
	endpointTransitions.WithLabelValues(purpose, address, to).Inc()
}

// forget drops the series of an address nobody probes any more.
func forget(purpose, address string) {
	probeDuration.DeleteLabelValues(purpose, address)
	endpointReady.DeleteLabelValues(purpose, address)
	endpointTransitions.DeletePartialMatch(prometheus.Labels{"purpose": purpose, "endpoint": address})
}
