// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package l2handover

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Results of a handover, the result label of handoversTotal.
const (
	// resultHandedOver: this node was written as the holder.
	resultHandedOver = "handed-over"
	// resultConflict: the lease changed between the read and the write (renewed, or handed to another node first).
	resultConflict = "conflict"
	// resultAcknowledged: this node's agent renewed the lease handed to it.
	resultAcknowledged = "acknowledged"
	// resultUndone: it did not in time, and the lease was cleared.
	resultUndone = "undone"
)

var (
	handoversTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cilium_selfhosted_l2_handovers_total",
		Help: "Handovers of an L2 announcement lease to this replica's node, by result: handed-over, conflict, acknowledged, undone.",
	}, []string{"result"})
	acknowledgeSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "cilium_selfhosted_l2_handover_acknowledge_seconds",
		Help:    "Time from a handover to the first renewal of the lease by this node's agent.",
		Buckets: []float64{.1, .25, .5, .75, 1, 1.5, 2, 3, 5},
	})
)

func init() {
	metrics.Registry.MustRegister(handoversTotal, acknowledgeSeconds)
}

func countHandover(result string) { handoversTotal.WithLabelValues(result).Inc() }
