// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package ciliumnodes

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	extensionsv1alpha1 "github.com/gardener/gardener/pkg/apis/extensions/v1alpha1"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/ciliumchart"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/fixtures"
)

// Rollout is what a rolling update of the agents did to the VIP. Times count from the update of the DaemonSet.
type Rollout struct {
	// Took is when every node ran an agent from a new pod, Ready.
	Took time.Duration
	// Holders are the lease holders in the order they held it ("" while nobody held it).
	Holders []Held
	// Answerers are the nodes (or MAC addresses) that answered ARP for the VIP; ARPSilence is the longest time in
	// which nobody answered, from ARPSilenceFrom on.
	Answerers                  []string
	ARPSilence, ARPSilenceFrom time.Duration
	// Attempts and Failed count the new HTTPS requests through the VIP, one every httpsInterval; Failures say when and
	// how they failed.
	Attempts, Failed int
	Failures         []string
	// Established counts the connections through the VIP opened before the update, each sending a request every
	// establishedInterval on its own TCP connection; Broken says when and how each that did not survive broke.
	Established int
	Broken      []string
	// HandedOver are the extension's HandedOver events meanwhile: released leases it took for a settled agent's node.
	HandedOver []string
	// Routes are the router's next hops to the VIP, each time they changed (under BGP).
	Routes []Route
}

// Route says that the router's route to the VIP went via Hops from At on.
type Route struct {
	Hops []string
	At   time.Duration
}

func (r Route) String() string { return fmt.Sprintf("%v after %s", r.Hops, r.At) }

// Withdrawals counts how often a next hop left the router's route to the VIP.
func (r Rollout) Withdrawals() int {
	n := 0
	for i := 1; i < len(r.Routes); i++ {
		for _, hop := range r.Routes[i-1].Hops {
			if !slices.Contains(r.Routes[i].Hops, hop) {
				n++
			}
		}
	}
	return n
}

// Moves counts how often the lease went from one node to another.
func (r Rollout) Moves() int {
	moves, last := 0, ""
	for _, h := range r.Holders {
		if h.Node != "" {
			if last != "" && h.Node != last {
				moves++
			}
			last = h.Node
		}
	}
	return moves
}

// Held says that Node held the lease from At on.
type Held struct {
	Node string
	At   time.Duration
}

func (h Held) String() string { return fmt.Sprintf("%q after %s", h.Node, h.At) }

// establishedInterval is how often an established connection through the VIP sends a request.
const establishedInterval = 200 * time.Millisecond

// RollOut waits until the VIP serves, opens established connections through it, and updates the pod template of
// the stored chart's agent DaemonSet as `kubectl rollout restart` does. Kubernetes' DaemonSet controller then replaces the
// pods by the chart's update strategy (maxUnavailable 2), and the nodes' kubelets stop the old agents with the pods'
// grace period and start the new ones (the nodes keep their datapath across the restart, hostFS). It returns once every
// node runs a new pod's agent, Ready, and the VIP serves again, with what the VIP did meanwhile. With a router (the
// exposure announcing over BGP), the connections come from the client behind it, and the router's route to the VIP is
// watched instead of the L2 lease and ARP.
func (c *Cluster) RollOut(ctx context.Context, exp *extensionsv1alpha1.SelfHostedShootExposure, established int, router *Router) (Rollout, error) {
	c.mu.Lock()
	inst := c.installed[c.stored]
	running := c.running != nil && c.running.Chart == c.stored
	c.mu.Unlock()
	if inst == nil || !running {
		return Rollout{}, fmt.Errorf("a rollout needs the stored chart %s running", c.stored)
	}
	o := &rolloutObserver{c: c, exp: exp, router: router}
	if err := o.serving(ctx); err != nil {
		return Rollout{}, err
	}
	old := map[types.UID]bool{}
	for _, n := range c.Nodes() {
		pod, err := c.Repins().RunningPod(ctx, n.Name, time.Minute)
		if err != nil {
			return Rollout{}, err
		}
		old[pod.UID] = true
		c.disturb(n.Name)
	}
	events, err := c.handoverEvents(ctx, exp)
	if err != nil {
		return Rollout{}, err
	}
	if err := o.openEstablished(ctx, established); err != nil {
		return o.r, err
	}
	defer o.closeEstablished()

	observe, stop := context.WithCancel(ctx)
	defer stop()
	o.start = time.Now()
	o.observe(observe)
	if err := c.restartAgents(ctx, inst, o.start); err != nil {
		return o.r, err
	}
	waitErr := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, n := range c.Nodes() {
			pod, running := c.runningPod(ctx, n)
			if !running || old[pod.UID] {
				return false, nil
			}
		}
		return true, nil
	})
	o.r.Took = time.Since(o.start)
	if waitErr == nil {
		waitErr = o.serving(ctx)
	}
	stop()
	o.observers.Wait()
	r := o.r
	r.Answerers = c.L2().Answerers(r.Answerers)
	if waitErr != nil {
		return r, fmt.Errorf("the rollout did not complete: %w", waitErr)
	}
	now, err := c.handoverEvents(ctx, exp)
	r.HandedOver = newMessages(events, now)
	return r, err
}

// restartAgents updates the pod template of Gardener's agent DaemonSet as `kubectl rollout restart` does at start.
func (c *Cluster) restartAgents(ctx context.Context, inst *installation, start time.Time) error {
	ds := &appsv1.DaemonSet{}
	if err := c.env.Client.Get(ctx, client.ObjectKeyFromObject(inst.agent), ds); err != nil {
		return err
	}
	patch := client.MergeFrom(ds.DeepCopy())
	metav1.SetMetaDataAnnotation(&ds.Spec.Template.ObjectMeta, "kubectl.kubernetes.io/restartedAt", start.Format(time.RFC3339))
	if err := c.env.Client.Patch(ctx, ds, patch); err != nil {
		return fmt.Errorf("updating the agent DaemonSet: %w", err)
	}
	return nil
}

// rolloutObserver records into r what the VIP does during a rollout, from start on: the established connections, new
// connections, and the L2 lease and ARP or, with a router, its route to the VIP.
type rolloutObserver struct {
	c      *Cluster
	exp    *extensionsv1alpha1.SelfHostedShootExposure
	router *Router
	start  time.Time
	// conns are the established connections, via where the router sent each.
	conns     []*tls.Conn
	via       []string
	observers sync.WaitGroup
	mu        sync.Mutex
	r         Rollout
}

// serving waits until the VIP serves: under L2, from the lease holder; under BGP, via every node.
func (o *rolloutObserver) serving(ctx context.Context) error {
	if o.router == nil {
		_, err := o.c.L2().WaitUntilServing(ctx, o.exp)
		return err
	}
	if err := o.router.WaitForEveryNextHop(ctx); err != nil {
		return err
	}
	_, _, err := o.c.BGP().ServedViaEveryNode(ctx, o.router)
	return err
}

func (o *rolloutObserver) since() time.Duration {
	return time.Since(o.start).Round(50 * time.Millisecond)
}

func (o *rolloutObserver) record(f func()) {
	o.mu.Lock()
	defer o.mu.Unlock()
	f()
}

// newConn is how one new connection through the VIP is dialled, and, once it was, where the router sent it.
func (o *rolloutObserver) newConn() (func(context.Context, string, string) (net.Conn, error), func(context.Context) string) {
	if o.router == nil {
		return o.c.Client.DialContext, func(context.Context) string { return "" }
	}
	sport := o.router.NextSourcePort()
	return o.router.dialer(sport), func(ctx context.Context) string { return o.router.Hop(ctx, sport) }
}

// openEstablished opens n connections through the VIP.
func (o *rolloutObserver) openEstablished(ctx context.Context, n int) error {
	tlsConfig, err := o.c.vipTLSConfig()
	if err != nil {
		return err
	}
	for range n {
		dial, hop := o.newConn()
		conn, err := dialVIP(ctx, dial, tlsConfig)
		if err != nil {
			o.closeEstablished()
			return fmt.Errorf("opening a connection through the VIP: %w", err)
		}
		o.conns, o.via = append(o.conns, conn), append(o.via, hop(ctx))
	}
	o.r.Established = len(o.conns)
	return nil
}

func (o *rolloutObserver) closeEstablished() {
	for _, conn := range o.conns {
		conn.Close()
	}
}

// observe starts the observers, which run until ctx ends.
func (o *rolloutObserver) observe(ctx context.Context) {
	for i, conn := range o.conns {
		o.observers.Go(func() {
			if err := keepRequesting(ctx, conn); err != nil && ctx.Err() == nil {
				o.record(func() {
					o.r.Broken = append(o.r.Broken, fmt.Sprintf("connection %d%s after %s: %v", i, viaNode(o.via[i]), o.since(), err))
				})
			}
		})
	}
	if o.router == nil {
		o.observeL2(ctx)
	} else {
		o.observers.Go(func() { o.watchRoute(ctx) })
	}
	o.observers.Go(func() { o.attemptNewConnections(ctx) })
}

// watchRoute records the router's next hops to the VIP each time they change.
func (o *rolloutObserver) watchRoute(ctx context.Context) {
	var last []string
	for ctx.Err() == nil {
		if hops, err := o.router.NextHops(fixtures.ExposureVIP); err == nil && (o.r.Routes == nil || !slices.Equal(hops, last)) {
			last = hops
			o.record(func() { o.r.Routes = append(o.r.Routes, Route{hops, o.since()}) })
		}
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// attemptNewConnections sends a request on a new connection through the VIP every httpsInterval.
func (o *rolloutObserver) attemptNewConnections(ctx context.Context) {
	ticker := time.NewTicker(httpsInterval)
	defer ticker.Stop()
	var attempts sync.WaitGroup
	defer attempts.Wait()
	for ctx.Err() == nil {
		attempts.Go(func() {
			attempt, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			dial, hop := o.newConn()
			_, err := o.c.readyzThroughVIP(attempt, dial)
			via := hop(ctx)
			if ctx.Err() != nil {
				return
			}
			o.record(func() {
				o.r.Attempts++
				if err != nil {
					o.r.Failed++
					o.r.Failures = append(o.r.Failures, fmt.Sprintf("%s%s: %v", o.since(), viaNode(via), err))
				}
			})
		})
		select {
		case <-ctx.Done():
		case <-ticker.C:
		}
	}
}

// viaNode is " via <hop>" for a connection the router sent to hop, "" for one that went no router's way.
func viaNode(hop string) string {
	if hop == "" {
		return ""
	}
	return " via " + hop
}

// observeL2 records, until ctx ends, who holds the exposure's L2 lease and who answers ARP for the VIP into r.
func (o *rolloutObserver) observeL2(ctx context.Context) {
	c, r := o.c, &o.r
	o.observers.Go(func() {
		last := time.Now()
		_ = arpAnswers(ctx, c.Client, fixtures.ExposureVIP, func(mac string, at time.Time) bool {
			o.record(func() {
				if silence := at.Sub(last); silence > r.ARPSilence {
					r.ARPSilence, r.ARPSilenceFrom = silence, last.Sub(o.start).Round(50*time.Millisecond)
				}
				if !slices.Contains(r.Answerers, mac) {
					r.Answerers = append(r.Answerers, mac)
				}
			})
			last = at
			return false
		})
	})
	o.observers.Go(func() {
		holder := "-"
		for ctx.Err() == nil {
			if now, err := c.L2().LeaseHolder(ctx, o.exp); err == nil && now != holder {
				holder = now
				o.record(func() { r.Holders = append(r.Holders, Held{now, o.since()}) })
			}
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	})
}

// vipTLSConfig is how the client verifies kube-apiserver through the VIP: under the shoot's external API name, with
// the test's admin credentials.
func (c *Cluster) vipTLSConfig() (*tls.Config, error) {
	tlsConfig, err := rest.TLSConfigFor(c.env.Config)
	if err != nil {
		return nil, err
	}
	tlsConfig.ServerName = ciliumchart.ExternalHost
	tlsConfig.NextProtos = []string{"http/1.1"}
	return tlsConfig, nil
}

// dialVIP opens a TLS connection to the VIP over dial.
func dialVIP(ctx context.Context, dial func(context.Context, string, string) (net.Conn, error), tlsConfig *tls.Config) (*tls.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	raw, err := dial(ctx, "tcp", fixtures.ExposureVIP+":443")
	if err != nil {
		return nil, err
	}
	conn := tls.Client(raw, tlsConfig)
	if err := conn.HandshakeContext(ctx); err != nil {
		raw.Close()
		return nil, err
	}
	return conn, nil
}

// keepRequesting sends GET /readyz on conn every establishedInterval until ctx ends, each request with two seconds for
// its response, and returns the first error: the connection did not survive.
func keepRequesting(ctx context.Context, conn *tls.Conn) error {
	reader := bufio.NewReader(conn)
	for ctx.Err() == nil {
		_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
		if _, err := fmt.Fprintf(conn, "GET /readyz HTTP/1.1\r\nHost: %s\r\n\r\n", ciliumchart.ExternalHost); err != nil {
			return err
		}
		resp, err := http.ReadResponse(reader, nil)
		if err != nil {
			return err
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET /readyz: %s", resp.Status)
		}
		select {
		case <-ctx.Done():
		case <-time.After(establishedInterval):
		}
	}
	return nil
}
