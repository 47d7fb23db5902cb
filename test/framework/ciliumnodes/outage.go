// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package ciliumnodes

import (
	"context"
	"fmt"
	"net"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	extensionsv1alpha1 "github.com/gardener/gardener/pkg/apis/extensions/v1alpha1"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/apiserverfailover"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/fixtures"
)

// One control-plane node's kube-apiserver stops while its node stays up, under either announcement: what new
// connections through the VIP see meanwhile and after it is back.

// APIServerOutage is what new connections through the VIP saw while one control-plane node's kube-apiserver was
// down and its node up, and after it came back.
type APIServerOutage struct {
	Node string
	// Announcer: the stopped kube-apiserver was the lease holder's, whose agent is then blind; NewHolder is who holds
	// the lease after the outage.
	Announcer         bool
	Holder, NewHolder string
	// Attempts and Failed count the requests through the VIP while it was down; LastFailure is when, after the stop,
	// the last of them failed, within the attempts' window (Window).
	Attempts, Failed    int
	LastFailure, Window time.Duration
	// TakenOut is when, after the stop, the exposure published the endpoint as not ready (0: not within the window);
	// Moved is when the lease left the node (0: it did not hold it, or did not leave within the window). Settled is
	// when both had happened: from then on the VIP is announced by a node whose agent sees the endpoint taken out.
	TakenOut, Moved, Settled time.Duration
	// FailedAfterSettled counts the failures after Settled; Failures say when (after the stop) and how they failed.
	// SucceededAtEnd is how many requests in a row succeeded at the end of the outage.
	FailedAfterSettled, SucceededAtEnd int
	Failures                           []string
	// Under BGP, the stopped kube-apiserver's node keeps announcing the VIP while its agent, which reaches
	// kube-apiserver only through it, is blind: it never learns that its own endpoint is out. ViaDown and
	// FailedViaDown count the requests after Settled that the router sent to that node, and those of them that failed;
	// FailedAfterSettled and SucceededAtEnd count only the others.
	ViaDown, FailedViaDown int
	// LastFailureElsewhere is when, after the stop, the last request failed that the router sent to another node.
	LastFailureElsewhere time.Duration
	// Back is when, after the start, the endpoint was published as ready again (0: not within the window);
	// BackAttempts and BackFailed count the requests from the start until outageTail after that; BackFailures say
	// when (after the start) and how they failed. Under BGP, BackFailedViaDown counts apart those the router sent to
	// the blind node before the endpoint was published ready, which failed for the same reason as ViaDown's.
	Back                                        time.Duration
	BackAttempts, BackFailed, BackFailedViaDown int
	BackFailures                                []string
	// ExtensionPod says the extension runs as pods (Options.ExtensionPods). Its pod on the node reached the other
	// control-plane nodes' kube-apiservers meanwhile (pkg/apiserverfailover); ExtensionHome is when, after the start,
	// it said it closed those connections to use its own node's again (0: not within extensionHomeWithin after the
	// requests that follow the start).
	ExtensionPod  bool
	ExtensionHome time.Duration
}

// extensionHomeWithin bounds the wait for the extension pod to return to its own node's kube-apiserver once the
// requests after the start are done: it tries every apiserverfailover.ReturnInterval.
const extensionHomeWithin = 30 * time.Second

// failure describes a request through the VIP that failed at after: where its packets went (the client's neighbour
// entry and the lease holder under L2, the router's next hop under BGP), what each agent load-balances the VIP to, and
// what the exposure publishes.
func (c *Cluster) failure(ctx context.Context, exp *extensionsv1alpha1.SelfHostedShootExposure, after time.Duration, a outageAttempt) string {
	where := "via " + a.hop
	if !a.bgp {
		holder, err := c.L2().LeaseHolder(ctx, exp)
		if err != nil {
			holder = "unknown"
		}
		where = fmt.Sprintf("lease held by %s, client's neighbour entry %q", holder, c.clientNeighbour())
	}
	return fmt.Sprintf("%s (%s, agents %s, published %s): %v",
		after.Round(100*time.Millisecond), where, c.L2().AgentViews(ctx), c.publishedEndpoints(ctx, exp), a.err)
}

// outageTail is how many requests are sent after the outage settled and after the endpoint is published as ready
// again.
const outageTail = 20

// Outage says how StopOneAPIServer sends its requests and whose kube-apiserver it stops.
type Outage struct {
	// Attempts is how many requests at least go through the VIP while the kube-apiserver is down.
	Attempts int
	// Announcer stops the L2 lease holder's kube-apiserver, another's otherwise.
	Announcer bool
	// Router, when set, is the BGP router the exposure announces the VIP to: the requests come from behind it, each
	// from a source port of its own, so that ECMP spreads them over the nodes, every one of which announces the VIP
	// (there is no holder, and Announcer is ignored). Unset, they come from the client on the nodes' segment.
	Router *Router
	// Drained, under BGP, names the control-plane node whose kube-apiserver stops, which the operator took out of the
	// announcement beforehand (Drain): the router has no route via it.
	Drained string
}

// outageAttempt is one new request through the VIP: under BGP, the node the router sent it to; how it failed.
type outageAttempt struct {
	bgp bool
	hop string
	err error
}

// outageAttempt sends one request. It fails when its connection is not made within outageConnectTimeout (its packets
// went nowhere, or nothing listened) or its answer is not OK within readyzThroughVIP's 5 s: a kube-apiserver that has
// just started answers slowly under load (make test of session 33: one answer took over 2 s at a load average of 15),
// which is not what the outage measures.
func (c *Cluster) outageAttempt(ctx context.Context, r *Router) outageAttempt {
	if r == nil {
		_, err := c.readyzThroughVIP(ctx, connectWithin(c.Client.DialContext))
		return outageAttempt{err: err}
	}
	sport := r.NextSourcePort()
	_, err := c.readyzThroughVIP(ctx, connectWithin(r.dialer(sport)))
	return outageAttempt{bgp: true, hop: r.Hop(ctx, sport), err: err}
}

// outageConnectTimeout bounds the connection of an outage's request through the VIP.
const outageConnectTimeout = 2 * time.Second

// connectWithin bounds each connection dial makes to outageConnectTimeout.
func connectWithin(dial func(ctx context.Context, network, addr string) (net.Conn, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		ctx, cancel := context.WithTimeout(ctx, outageConnectTimeout)
		defer cancel()
		return dial(ctx, network, addr)
	}
}

// StopOneAPIServer waits until the VIP serves, stops the kube-apiserver of a control-plane node as o says, and sends
// new requests through the VIP, about every 200 ms: o.Attempts of them (at least), outageTail more once the outage
// settled (Settled), and on until the last outageTail succeeded, for at most two minutes. Then it starts the
// kube-apiserver again and sends requests until outageTail after it is published as ready again.
func (c *Cluster) StopOneAPIServer(ctx context.Context, exp *extensionsv1alpha1.SelfHostedShootExposure, o Outage) (out APIServerOutage, err error) {
	announcer := o.Announcer && o.Router == nil
	holder, err := c.servingBeforeOutage(ctx, exp, o)
	if err != nil {
		return out, err
	}
	i := slices.IndexFunc(c.Nodes(), func(n *Node) bool {
		if o.Drained != "" {
			return n.Name == o.Drained
		}
		return n.ControlPlane && (n.Name == holder) == announcer
	})
	m := &outageMeasurement{c: c, exp: exp, router: o.Router, announcer: announcer, down: c.Nodes()[i]}
	m.out.Node, m.out.Announcer, m.out.Holder = m.down.Name, announcer, holder
	c.disturb(m.down.Name)
	if err := m.down.SwitchAPIServer(false); err != nil {
		return m.out, err
	}
	switchedOn := false
	defer func() {
		if !switchedOn {
			if onErr := m.down.SwitchAPIServer(true); err == nil {
				err = onErr
			}
		}
	}()
	if err := m.whileDown(ctx, o.Attempts); err != nil && !wait.Interrupted(err) {
		return m.out, err
	}
	if o.Router == nil {
		if m.out.NewHolder, err = c.L2().WaitForLeaseHolder(ctx, exp, ""); err != nil {
			return m.out, err
		}
	}
	switchedOn = true
	returns := len(m.down.extensionLogTimes(apiserverfailover.LogReturned))
	start := time.Now()
	if err := m.down.SwitchAPIServer(true); err != nil {
		return m.out, err
	}
	if err := m.afterReturn(ctx); err != nil {
		return m.out, err
	}
	if m.out.ExtensionPod = c.webhookRoute != nil; m.out.ExtensionPod {
		_ = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, extensionHomeWithin, true, func(context.Context) (bool, error) {
			if times := m.down.extensionLogTimes(apiserverfailover.LogReturned); len(times) > returns {
				// The log says milliseconds: a return within the first one reads as at least a nanosecond.
				m.out.ExtensionHome = max(times[returns].Sub(start), time.Nanosecond)
			}
			return m.out.ExtensionHome > 0, nil
		})
	}
	return m.out, nil
}

// servingBeforeOutage waits until the VIP serves as o expects it before the outage: from the lease holder, which it
// returns, under L2; via every node not drained under BGP.
func (c *Cluster) servingBeforeOutage(ctx context.Context, exp *extensionsv1alpha1.SelfHostedShootExposure, o Outage) (string, error) {
	if o.Drained != "" && (o.Router == nil || c.nodes[o.Drained] == nil) {
		return "", fmt.Errorf("only a control-plane node under BGP can be drained, not %q", o.Drained)
	}
	if o.Router == nil {
		return c.L2().WaitUntilServing(ctx, exp)
	}
	announcing := slices.DeleteFunc(slices.Clone(fixtures.ControlPlaneIPs), func(ip string) bool {
		return o.Drained != "" && ip == c.nodes[o.Drained].Address()
	})
	if err := o.Router.WaitForNextHops(ctx, announcing); err != nil {
		return "", err
	}
	_, _, err := c.BGP().ServedVia(ctx, o.Router, announcing, time.Minute)
	return "", err
}

// outageMeasurement is one kube-apiserver's outage (down's) as StopOneAPIServer measures it into out.
type outageMeasurement struct {
	c         *Cluster
	exp       *extensionsv1alpha1.SelfHostedShootExposure
	router    *Router
	announcer bool
	down      *Node
	out       APIServerOutage
}

// whileDown sends requests through the VIP while down's kube-apiserver is stopped, until at least attempts were sent,
// outageTail after the outage settled, and the last outageTail succeeded, for at most two minutes.
func (m *outageMeasurement) whileDown(ctx context.Context, attempts int) error {
	out := &m.out
	start := time.Now()
	defer func() { out.Window = time.Since(start) }()
	tail := 0
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		// A read that failed says nothing new; the requests go on.
		ready, err := m.c.endpointReady(ctx, m.exp, m.down)
		if err != nil {
			ready = out.TakenOut == 0
		}
		if !ready && out.TakenOut == 0 {
			out.TakenOut = time.Since(start)
		}
		if m.announcer && out.Moved == 0 {
			if now, err := m.c.L2().LeaseHolder(ctx, m.exp); err == nil && now != "" && now != m.down.Name {
				out.Moved = time.Since(start)
			}
		}
		if out.Settled == 0 && out.TakenOut > 0 && (!m.announcer || out.Moved > 0) {
			out.Settled = time.Since(start)
		}
		a := m.c.outageAttempt(ctx, m.router)
		m.count(ctx, a, start)
		if out.Settled > 0 {
			tail++
		}
		return out.Attempts >= attempts && tail >= outageTail && out.SucceededAtEnd >= outageTail, nil
	})
}

// count adds attempt a, made start after the stop, to the outage's counts.
func (m *outageMeasurement) count(ctx context.Context, a outageAttempt, start time.Time) {
	out := &m.out
	out.Attempts++
	if a.err != nil {
		out.Failed++
		out.LastFailure = time.Since(start)
		if a.bgp && a.hop != m.down.Address() {
			out.LastFailureElsewhere = out.LastFailure
		}
	}
	blind := out.Settled > 0 && a.bgp && a.hop == m.down.Address()
	switch {
	case blind:
		out.ViaDown++
	case a.err != nil:
		out.SucceededAtEnd = 0
	default:
		out.SucceededAtEnd++
	}
	if out.Settled == 0 || a.err == nil {
		return
	}
	if blind {
		out.FailedViaDown++
	} else {
		out.FailedAfterSettled++
	}
	out.Failures = append(out.Failures, m.c.failure(ctx, m.exp, out.LastFailure, a))
}

// afterReturn sends requests through the VIP after down's kube-apiserver started again, until outageTail after its
// endpoint is published as ready again, for at most two minutes.
func (m *outageMeasurement) afterReturn(ctx context.Context) error {
	out := &m.out
	start, tail := time.Now(), 0
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		ready, err := m.c.endpointReady(ctx, m.exp, m.down)
		if err != nil {
			ready = out.Back > 0
		}
		if ready && out.Back == 0 {
			out.Back = time.Since(start)
		}
		out.BackAttempts++
		a := m.c.outageAttempt(ctx, m.router)
		switch {
		case a.err == nil:
		case out.Back == 0 && a.bgp && a.hop == m.down.Address():
			// The blind agent still sends its share to its own kube-apiserver, which fails until that serves again.
			out.BackFailedViaDown++
		default:
			out.BackFailed++
			out.BackFailures = append(out.BackFailures, m.c.failure(ctx, m.exp, time.Since(start), a))
		}
		if out.Back > 0 {
			tail++
		}
		return tail >= outageTail, nil
	})
}
