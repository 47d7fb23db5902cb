// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package datapath

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// establishedThroughRollout is how many connections through the VIP are open while the agents roll.
const establishedThroughRollout = 6

// TestVIPThroughRollingUpdate: Gardener's agent DaemonSet rolls (the harness stores no other chart's), as a new Cilium version or a changed setting rolls
// it. Kubernetes' DaemonSet controller replaces the pods two at a time (the chart's maxUnavailable), the nodes'
// kubelets give each old agent the pod's grace period, and each node keeps its datapath across the restart, as a real
// node does. Only control-plane nodes may hold the lease and answer ARP for the VIP, and the VIP must serve at the end.
// What happened meanwhile is logged (make bench reports it over several runs): who held the lease, how long nobody
// answered ARP, which new requests and which established connections through the VIP failed. An agent that stops
// releases its lease (Cilium's l2announcer: ReleaseOnCancel), so the announcement moves whenever the holder's agent
// restarts, and the connections through the old holder break: the new one has no connection-tracking entry for them.
func TestVIPThroughRollingUpdate(t *testing.T) {
	ctx := context.Background()
	l := gardenerLane
	l.hold(t)
	exp := expose(t, l)
	if err := l.cluster.ExtensionArgs(ctx); err != nil {
		t.Fatal(err)
	}
	r, err := l.cluster.RollOut(ctx, exp, establishedThroughRollout, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range r.Holders {
		if h.Node != "" && !l.cluster.Node(h.Node).ControlPlane {
			t.Errorf("the lease went to %s, which is no control-plane node", h)
		}
	}
	for _, a := range r.Answerers {
		if n := l.cluster.Node(a); n == nil || !n.ControlPlane {
			t.Errorf("ARP for the VIP was answered by %s, which is no control-plane node", a)
		}
	}
	// Every kube-apiserver stays up: the extension may take only leases the stopping agents released.
	for _, e := range r.HandedOver {
		if !strings.Contains(e, "from nobody (released)") {
			t.Errorf("HandedOver %q during the rollout, want only released leases taken", e)
		}
	}
	t.Logf("the agents rolled in %s; lease held by %s (%d moves); ARP answered by %v, nobody for at most %s (from %s on); %d of %d new requests through the VIP failed: %s; %d of %d established connections broke: %s; handed over: %s",
		r.Took.Round(100*time.Millisecond), strings.Trim(fmt.Sprint(r.Holders), "[]"), r.Moves(), r.Answerers, r.ARPSilence.Round(50*time.Millisecond), r.ARPSilenceFrom,
		r.Failed, r.Attempts, strings.Join(r.Failures, "; "), len(r.Broken), r.Established, strings.Join(r.Broken, "; "), strings.Join(r.HandedOver, "; "))
}
