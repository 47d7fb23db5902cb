// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package datapath

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	extensionsv1alpha1 "github.com/gardener/gardener/pkg/apis/extensions/v1alpha1"

	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/ciliumnodes"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/fixtures"
)

// expose is the lane's exposure of kube-apiserver on the VIP, with the extension's logs shown if the case fails.
func expose(t *testing.T, l *lane) *extensionsv1alpha1.SelfHostedShootExposure {
	t.Helper()
	showExtensionLogsOnFailure(t, l)
	// The lane's hold settled it: its agents run and the exposure is made, which Expose returns.
	exp, err := l.cluster.L2().Expose(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return exp
}

// TestVIP: the exposure puts kube-apiserver on the VIP with Cilium alone. From the client, exactly one control-plane
// node, the holder of Cilium's L2 announcement lease, answers ARP for the VIP, and HTTPS to the VIP under the shoot's
// API name reaches a kube-apiserver whose certificate verifies; with each Cilium line (the newest one re-evaluates an
// L2 service when its addresses change).
func TestVIP(t *testing.T) {
	onEachLane(t, func(t *testing.T, l *lane) {
		exp := expose(t, l)
		if len(exp.Status.Ingress) != 1 || exp.Status.Ingress[0].IP != fixtures.ExposureVIP {
			t.Fatalf("status.ingress %+v, want %s", exp.Status.Ingress, fixtures.ExposureVIP)
		}
		vipAnnounced(t, l, exp)
	})
}

func vipAnnounced(t *testing.T, l *lane, exp *extensionsv1alpha1.SelfHostedShootExposure) {
	ctx := context.Background()
	// Agents the case before restarted may still move the lease or not have attached their programs: the VIP is
	// looked at once only its holder answers ARP and it serves (WaitUntilServing).
	holder, err := l.cluster.L2().WaitUntilServing(ctx, exp)
	if err != nil {
		t.Fatal(err)
	}
	if !l.cluster.Node(holder).ControlPlane {
		t.Errorf("%s holds the announcement lease, but is no control-plane node", holder)
	}
	macs, err := l.cluster.L2().WaitForARP(ctx, func(macs []string) bool { return len(macs) > 0 })
	if err != nil {
		t.Fatalf("nobody answers ARP for %s: %v", fixtures.ExposureVIP, err)
	}
	want, err := l.cluster.Node(holder).MAC()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(macs, []string{want}) {
		t.Errorf("ARP for %s answered by %v, want only %s of the lease holder %s", fixtures.ExposureVIP, macs, want, holder)
	}
	body, err := l.cluster.L2().ReadyzThroughVIP(ctx)
	if err != nil {
		t.Fatalf("HTTPS through the VIP: %v", err)
	}
	t.Logf("VIP %s announced by %s (%s); /readyz through it: %s", fixtures.ExposureVIP, holder, want, body)
}

// TestVIPFailover: the lease holder's node dies without handing anything over: its link goes down, or it hangs (link
// up, every packet dropped, its processes frozen). The extension's pod on another control-plane node sees the holder's
// kube-apiserver fail and the lease go unrenewed, and hands the lease to its own node (pkg/controller/l2handover): that
// node answers ARP for the VIP, HTTPS through the VIP works again, and the exposure carries the HandedOver event; with
// the handover switched off, the lease moves only once it expired, and no event says otherwise; with each Cilium line.
// On the newest line's lane also with Cilium's default lease timings set in cilium-config (as networking-cilium renders
// them from the Shoot's networking providerConfig; kept by the webhook, read by the handover from cilium-config).
// The times are logged (make bench reports them over several runs, section 6 with both lines); the dead node is
// started again by the next Run.
func TestVIPFailover(t *testing.T) {
	onEachLane(t, func(t *testing.T, l *lane) { vipFailovers(t, l, expose(t, l)) })
}

func vipFailovers(t *testing.T, l *lane, exp *extensionsv1alpha1.SelfHostedShootExposure) {
	ctx := context.Background()
	for _, tc := range []struct {
		name     string
		lease    *ciliumnodes.LeaseTimings
		death    ciliumnodes.Death
		handover bool
		want     time.Duration
	}{
		{"link down", nil, ciliumnodes.LinkDown, true, 5 * time.Second},
		{"hung", nil, ciliumnodes.Hung, true, 5 * time.Second},
		// Before the other lease timings: with the agents' timings unchanged since the lane settled, the failover need
		// not wait for the handover to read them again (FailOver's timingsSettled), nor the agents restart twice.
		{"handover switched off", nil, ciliumnodes.LinkDown, false, 5 * time.Second},
		{"Cilium's default lease", ciliumnodes.CiliumDefaultLease, ciliumnodes.LinkDown, true, ciliumnodes.CiliumDefaultLease.Duration},
	} {
		// Other lease timings on the newest line's lane only, which balances the lanes.
		if tc.lease != nil && l != newestLane {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			showExtensionLogsOnFailure(t, l)
			var args []string
			if !tc.handover {
				args = []string{"--l2-handover=false"}
			}
			// Run first: it starts the node that died last again.
			if err := l.run(ctx, ciliumnodes.Agents{Lease: tc.lease}); err != nil {
				t.Fatal(err)
			}
			if err := l.cluster.ExtensionArgs(ctx, args...); err != nil {
				t.Fatal(err)
			}
			f, err := l.cluster.L2().FailOver(ctx, exp, tc.death)
			if err != nil {
				t.Fatal(err)
			}
			if f.Lease != tc.want {
				t.Errorf("the lease holder wrote a lease duration of %s, want %s", f.Lease, tc.want)
			}
			if f.To == f.From || !l.cluster.Node(f.To).ControlPlane {
				t.Errorf("the lease went from %s to %s", f.From, f.To)
			}
			macs, err := l.cluster.L2().ARP(fixtures.ExposureVIP)
			if err != nil {
				t.Fatal(err)
			}
			if want, err := l.cluster.Node(f.To).MAC(); err != nil || !slices.Equal(macs, []string{want}) {
				t.Errorf("ARP answered by %v (%v), want only the new holder %s's %s (%v)", macs, l.cluster.L2().Answerers(macs), f.To, want, err)
			}
			// The handover sticks: the node it handed the lease to keeps it.
			switch handedOver := "from " + f.From + " to " + f.To + ":"; {
			case tc.handover && !strings.Contains(f.HandedOver, handedOver):
				t.Errorf("HandedOver event %q, want one %s", f.HandedOver, handedOver)
			case !tc.handover && f.HandedOver != "":
				t.Errorf("HandedOver event %q with the handover switched off", f.HandedOver)
			}
			// The handed term is the new holder's agent's own: it renews it rather than acquiring a lease of its own.
			if m := f.LeaseMove; tc.handover && (m.Moved <= 0 || m.TakenUp <= m.Moved) {
				t.Errorf("after the handover the lease was %s, want the new holder's agent to renew the term handed to it", m)
			}
			t.Logf("%s died (%s): %s answers ARP for the VIP after %s, HTTPS through the VIP works after %s (lease duration %s; %s); %s",
				f.From, tc.death, f.To, f.ARP.Round(100*time.Millisecond), f.HTTPS.Round(100*time.Millisecond), f.Lease, f.LeaseMove, f.HandedOver)
		})
	}
}

// outageSettledInARow is how many of the requests after an outage settled must succeed, the last of them in a row.
const outageSettledInARow = 15

// TestVIPWithOneAPIServerDown: one control-plane node's kube-apiserver stops while the node stays up. The extension,
// probing from the control-plane nodes as its chart's pods, publishes that endpoint as not ready; once the agents have
// applied that, no new connection through the VIP fails (Cilium's load balancer skips a backend in maintenance), and none fails after the
// kube-apiserver is back either; the extension pod on that node, which reached the other nodes' kube-apiservers
// meanwhile, uses its own again. When the stopped kube-apiserver is the announcer's own, its agent is blind (it reaches
// kube-apiserver only through it): the lease is handed to another node as well; with each Cilium line. The failing
// window is logged.
func TestVIPWithOneAPIServerDown(t *testing.T) {
	onEachLane(t, func(t *testing.T, l *lane) { vipWithOneAPIServerDown(t, l, expose(t, l)) })
}

// checkOutage asserts what holds for every outage of one kube-apiserver: some requests succeeded, the endpoint was
// taken out, the last outageSettledInARow requests of those counted (which) succeeded, none failed once it was back,
// and the extension pod on the node, which reached the other nodes' kube-apiservers meanwhile, returned to its own.
func checkOutage(t *testing.T, o ciliumnodes.APIServerOutage, which string) {
	t.Helper()
	if o.Failed == o.Attempts {
		t.Fatalf("no request through the VIP succeeded with %s's kube-apiserver down", o.Node)
	}
	if o.TakenOut == 0 {
		t.Errorf("the exposure never published %s's endpoint as not ready within %s", o.Node, o.Window.Round(100*time.Millisecond))
	}
	if o.SucceededAtEnd < outageSettledInARow {
		t.Errorf("after %s's endpoint was published as not ready %s still failed: %v", o.Node, which, o.Failures)
	} else if o.FailedAfterSettled > 0 {
		t.Logf("%d of %s failed after %s's endpoint was published as not ready: %v", o.FailedAfterSettled, which, o.Node, o.Failures)
	}
	if o.Back == 0 || o.BackFailed > 0 {
		t.Errorf("after %s's kube-apiserver came back: published ready after %s, %d of %d requests failed: %v", o.Node, o.Back, o.BackFailed, o.BackAttempts, o.BackFailures)
	}
	// Left on another node's kube-apiserver, the replica would be blind when that node dies (TestVIPFailover).
	if o.ExtensionPod && o.ExtensionHome == 0 {
		t.Errorf("the extension pod on %s did not return to its node's kube-apiserver after it came back", o.Node)
	}
}

func vipWithOneAPIServerDown(t *testing.T, l *lane, exp *extensionsv1alpha1.SelfHostedShootExposure) {
	ctx := context.Background()
	for _, tc := range []struct {
		name      string
		announcer bool
	}{{"another node's", false}, {"the announcer's", true}} {
		t.Run(tc.name, func(t *testing.T) {
			if err := l.run(ctx, ciliumnodes.Agents{}); err != nil {
				t.Fatal(err)
			}
			if err := l.cluster.ExtensionArgs(ctx); err != nil {
				t.Fatal(err)
			}
			o, err := l.cluster.StopOneAPIServer(ctx, exp, ciliumnodes.Outage{Attempts: 30, Announcer: tc.announcer})
			if err != nil {
				t.Fatal(err)
			}
			if tc.announcer && o.Moved == 0 {
				t.Errorf("%s, whose agent is blind, kept the lease for %s", o.Node, o.Window.Round(100*time.Millisecond))
			}
			// The announcer's agent learns of the published endpoint a moment after the slice is written: 1.20.2's
			// agents took up to 4.6 s now and then, their own API listing the backend as active meanwhile
			// (docs/operations/failure-modes.md, "A kube-apiserver behind the VIP is not ready"). The requests go on
			// until the VIP serves again.
			checkOutage(t, o, "new connections through the VIP")
			t.Logf("%s's kube-apiserver down, its node up: %d of %d new connections through the VIP failed, the last %s after the stop; "+
				"published not ready after %s; lease held by %s, then %s (moved after %s); back: published ready after %s, %d of %d failed; the extension pod back on its node's after %s",
				o.Node, o.Failed, o.Attempts, o.LastFailure.Round(100*time.Millisecond), o.TakenOut.Round(100*time.Millisecond), o.Holder, o.NewHolder,
				o.Moved.Round(100*time.Millisecond), o.Back.Round(100*time.Millisecond), o.BackFailed, o.BackAttempts, o.ExtensionHome.Round(100*time.Millisecond))
		})
	}
}
