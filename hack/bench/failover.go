package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/gardener/gardener-extension-cilium-selfhosted/test/ciliumnodes"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/fixtures"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/podrun"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/testenv"
)

const failoverSection = "6. VIP failover with Cilium's real agents (L2, network-namespace nodes, test/ciliumnodes)"

// kubeVIPFailover is kube-vip's documented ARP failover time, the usual way to put kube-apiserver on a VIP today.
const kubeVIPFailover = 3 * time.Second

// vipFailover runs section 6 in a control plane of its own, serving a certificate made as Gardener makes it: the
// agents of Gardener's chart on three control-plane nodes and a worker, the exposure reconciled by the extension with
// the real operator, and the lease holder's node killed runs times: with the exposure's lease timings, its link down
// or hung, and with Cilium's defaults. Then one kube-apiserver is stopped while its node stays up.
func vipFailover(r *report, runs int) error {
	return withCiliumNodes(r, "6", "cbench", func(ctx context.Context, _ *testenv.Env, cluster *ciliumnodes.Cluster) error {
		return failovers(ctx, r, cluster, runs)
	})
}

// withCiliumNodes runs do on a cluster of real agents (test/ciliumnodes) in a control plane of its own, serving a
// certificate made as Gardener makes it, or notes why section cannot run. An interrupted bench still removes its
// namespaces, cgroups and processes.
func withCiliumNodes(r *report, section, prefix string, do func(context.Context, *testenv.Env, *ciliumnodes.Cluster) error) error {
	if err := ciliumnodes.Available(); err != nil {
		r.Notes = append(r.Notes, "Section "+section+" did not run: "+err.Error())
		fmt.Println("   skipped:", err)
		return nil
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	env, stopShoot, err := startShoot(ctx, "shoot--local--bench")
	if err != nil {
		return err
	}
	defer stopShoot()
	cluster, err := ciliumnodes.New(ctx, env, prefix+strconv.Itoa(os.Getpid()))
	if err != nil {
		return err
	}
	defer cluster.Close()
	return do(ctx, env, cluster)
}

func failovers(ctx context.Context, r *report, cluster *ciliumnodes.Cluster, runs int) error {
	exp, err := cluster.Expose(ctx)
	if err != nil {
		return err
	}
	seconds := func(d time.Duration) float64 { return d.Seconds() }
	for _, m := range []struct {
		lease *ciliumnodes.LeaseTimings
		death ciliumnodes.Death
	}{
		{nil, ciliumnodes.LinkDown},
		{nil, ciliumnodes.Hung},
		{ciliumnodes.CiliumDefaultLease, ciliumnodes.LinkDown},
	} {
		var arp, https []time.Duration
		var leaseDuration time.Duration
		for i := range runs {
			if _, err := cluster.Run(ctx, ciliumnodes.Agents{Lease: m.lease}); err != nil {
				return err
			}
			f, err := cluster.FailOver(ctx, exp, m.death)
			if err != nil {
				return err
			}
			fmt.Printf("   lease %s, node %s, run %d: %s died, %s answers ARP after %s, HTTPS after %s\n", m.lease, m.death, i+1, f.From, f.To,
				f.ARP.Round(100*time.Millisecond), f.HTTPS.Round(100*time.Millisecond))
			arp, https, leaseDuration = append(arp, f.ARP), append(https, f.HTTPS), f.Lease
		}
		slices.Sort(arp)
		slices.Sort(https)
		lease := "the exposure's lease"
		if m.lease != nil {
			lease = "Cilium's default lease"
		}
		name := fmt.Sprintf("%s (%s), node %s, %d runs", lease, leaseDuration, m.death, runs)
		for _, q := range []struct {
			what     string
			measured []time.Duration
		}{{"ARP answered by a live node", arp}, {"HTTPS through the VIP again", https}} {
			r.add(Result{Section: failoverSection, Name: q.what + ", median, " + name, Value: seconds(q.measured[len(q.measured)/2]), Unit: "s",
				Baseline: seconds(kubeVIPFailover), BaselineName: "kube-vip's documented ARP failover"})
			r.add(Result{Section: failoverSection, Name: q.what + ", max, " + name, Value: seconds(q.measured[len(q.measured)-1]), Unit: "s",
				Baseline: seconds(ciliumnodes.CiliumDefaultLease.Duration), BaselineName: "Cilium's default lease duration"})
		}
	}
	if _, err := cluster.Run(ctx, ciliumnodes.Agents{}); err != nil {
		return err
	}
	o, err := cluster.StopOneAPIServer(ctx, exp, 60)
	if err != nil {
		return err
	}
	r.add(Result{Section: failoverSection, Name: fmt.Sprintf("new connections through the VIP failing with %s's kube-apiserver down, its node up (%d attempts)", o.Node, o.Attempts),
		Value: 100 * float64(o.Failed) / float64(o.Attempts), Unit: "%", Baseline: 100.0 / 3, BaselineName: "one backend of three"})
	r.add(Result{Section: failoverSection, Name: fmt.Sprintf("new connections through the VIP still failing after the stop of %s's kube-apiserver (last failure)", o.Node),
		Value: seconds(o.LastFailure), Unit: "s", Baseline: seconds(o.Window), BaselineName: "the whole window of attempts"})
	r.Notes = append(r.Notes, "Section 6, link down: the bridge forgets the dead node's MAC and floods frames for it to every port; "+
		"the other nodes' Cilium (its tc program on eth0 sees frames for any MAC) load-balances the VIP from them, so HTTPS may "+
		"recover before ARP moves. Hung (link up, every IP packet dropped): the bridge keeps forwarding to the dead port, and "+
		"HTTPS waits until the new holder's gratuitous ARP (pkg/datapath/l2responder) moves the client's neighbour entry.")
	return nil
}

// startShoot starts a control plane of its own that serves a certificate made as Gardener makes it for the shoot
// technicalID, creates the self-hosted shoot with an L2 exposure configuration and runs the extension; stop ends them.
func startShoot(ctx context.Context, technicalID string) (env *testenv.Env, stop func(), err error) {
	certs, err := podrun.ShootCertificates(technicalID)
	if err != nil {
		return nil, nil, err
	}
	if env, err = testenv.Start(testenv.Options{Certificates: certs}); err != nil {
		return nil, nil, err
	}
	if err := env.CreateSelfHostedShoot(ctx, fixtures.WithExposureConfig(fixtures.Shoot(true), fixtures.ExposureConfigL2)); err != nil {
		env.Stop()
		return nil, nil, err
	}
	if err := env.RunExtension(ctx, ""); err != nil {
		env.Stop()
		return nil, nil, err
	}
	return env, func() {
		env.Extension.Stop(context.Background())
		env.Stop()
	}, nil
}
