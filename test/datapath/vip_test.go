package datapath

import (
	"context"
	"slices"
	"testing"
	"time"

	extensionsv1alpha1 "github.com/gardener/gardener/pkg/apis/extensions/v1alpha1"

	"github.com/gardener/gardener-extension-cilium-selfhosted/test/ciliumnodes"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/fixtures"
)

// expose runs the agents (of the chart that runs: the VIP works alike with both) with the exposure's lease timings
// and exposes kube-apiserver on the VIP.
func expose(t *testing.T) *extensionsv1alpha1.SelfHostedShootExposure {
	t.Helper()
	ctx := context.Background()
	if _, err := cluster.Run(ctx, ciliumnodes.Agents{}); err != nil {
		t.Fatal(err)
	}
	exp, err := cluster.Expose(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return exp
}

// TestVIP: the exposure puts kube-apiserver on the VIP with Cilium alone. From the client, exactly one control-plane
// node, the holder of Cilium's L2 announcement lease, answers ARP for the VIP, and HTTPS to the VIP under the shoot's
// API name reaches a kube-apiserver whose certificate verifies.
func TestVIP(t *testing.T) {
	ctx := context.Background()
	exp := expose(t)
	if len(exp.Status.Ingress) != 1 || exp.Status.Ingress[0].IP != fixtures.ExposureVIP {
		t.Fatalf("status.ingress %+v, want %s", exp.Status.Ingress, fixtures.ExposureVIP)
	}
	holder, err := cluster.WaitForLeaseHolder(ctx, exp, "")
	if err != nil {
		t.Fatal(err)
	}
	if !cluster.Node(holder).ControlPlane {
		t.Errorf("%s holds the announcement lease, but is no control-plane node", holder)
	}
	macs, err := cluster.WaitForARP(ctx, func(macs []string) bool { return len(macs) > 0 })
	if err != nil {
		t.Fatalf("nobody answers ARP for %s: %v", fixtures.ExposureVIP, err)
	}
	want, err := cluster.Node(holder).MAC()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(macs, []string{want}) {
		t.Errorf("ARP for %s answered by %v, want only %s of the lease holder %s", fixtures.ExposureVIP, macs, want, holder)
	}
	body, err := cluster.ReadyzThroughVIP(ctx)
	if err != nil {
		t.Fatalf("HTTPS through the VIP: %v", err)
	}
	t.Logf("VIP %s announced by %s (%s); /readyz through it: %s", fixtures.ExposureVIP, holder, want, body)
}

// TestVIPFailover: the lease holder's node dies (its link and its agent); another control-plane node takes the lease
// and answers ARP for the VIP, and HTTPS through the VIP works again: first with the lease timings the webhook puts
// into cilium-config from the exposure, then with Cilium's defaults. The times are logged (make bench reports them
// over several runs); the dead node is started again by the next Run.
func TestVIPFailover(t *testing.T) {
	ctx := context.Background()
	exp := expose(t)
	for _, tc := range []struct {
		name  string
		lease *ciliumnodes.LeaseTimings
		want  time.Duration
	}{
		{"the exposure's lease", nil, 5 * time.Second},
		{"Cilium's default lease", ciliumnodes.CiliumDefaultLease, ciliumnodes.CiliumDefaultLease.Duration},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := cluster.Run(ctx, ciliumnodes.Agents{Lease: tc.lease}); err != nil {
				t.Fatal(err)
			}
			f, err := cluster.FailOver(ctx, exp, ciliumnodes.LinkDown)
			if err != nil {
				t.Fatal(err)
			}
			if f.Lease != tc.want {
				t.Errorf("the lease holder wrote a lease duration of %s, want %s", f.Lease, tc.want)
			}
			if f.To == f.From || !cluster.Node(f.To).ControlPlane {
				t.Errorf("the lease went from %s to %s", f.From, f.To)
			}
			macs, err := cluster.ARP(fixtures.ExposureVIP)
			if err != nil {
				t.Fatal(err)
			}
			if want, err := cluster.Node(f.To).MAC(); err != nil || !slices.Equal(macs, []string{want}) {
				t.Errorf("ARP answered by %v, want only the new holder %s's %s (%v)", macs, f.To, want, err)
			}
			t.Logf("%s died: %s answers ARP for the VIP after %s, HTTPS through the VIP works after %s (lease duration %s)",
				f.From, f.To, f.ARP.Round(100*time.Millisecond), f.HTTPS.Round(100*time.Millisecond), f.Lease)
		})
	}
}

// TestVIPWithOneAPIServerDown: one control-plane node's kube-apiserver stops while the node stays up. The VIP keeps
// serving, but Cilium keeps sending a share of the new connections to the stopped kube-apiserver as long as the
// exposure's EndpointSlice lists it as ready (the need for active health checking). The share is logged.
func TestVIPWithOneAPIServerDown(t *testing.T) {
	ctx := context.Background()
	exp := expose(t)
	o, err := cluster.StopOneAPIServer(ctx, exp, 30)
	if err != nil {
		t.Fatal(err)
	}
	if o.Failed == o.Attempts {
		t.Fatalf("no request through the VIP succeeded with %s's kube-apiserver down", o.Node)
	}
	t.Logf("with %s's kube-apiserver down and its node up, %d of %d new connections through the VIP failed (3 backends); the last failed %s after the stop, in a window of %s",
		o.Node, o.Failed, o.Attempts, o.LastFailure.Round(100*time.Millisecond), o.Window.Round(100*time.Millisecond))
}
