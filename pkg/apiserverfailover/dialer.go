// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

// Package apiserverfailover is how the extension's own clients reach kube-apiserver on a self-hosted shoot: their
// node's kube-apiserver at localhost (KUBERNETES_SERVICE_HOST in the extension's chart), and when that cannot be
// reached, the other control-plane nodes' kube-apiservers. Without it a replica whose node's kube-apiserver stopped is
// blind: a leader there could neither take that kube-apiserver out of the exposure nor hand its terms over before its
// lease expired, while the kube-apiserver on the next node serves. Once its node's kube-apiserver answers again, the
// connections to the other nodes are closed, so that the clients dial their own node's again: left open, such a
// connection would make the replica blind when that other node dies, for as long as HTTP/2's ping takes to notice.
package apiserverfailover

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
)

// DialTimeout bounds each address a dial tries while there are others to fall back to: loopback and the nodes'
// network answer within milliseconds, and a node that is gone must not hold up the next one.
const DialTimeout = time.Second

// aloneDialTimeout bounds the one address a dial tries when there is none to fall back to (before the control-plane
// nodes are known, at the start): client-go's own (k8s.io/client-go/transport/cache.go). With DialTimeout there, a
// start on a loaded node failed its first request, and the process exited (make test u3 of session 34).
const aloneDialTimeout = 30 * time.Second

// ReturnInterval is how often a Dialer with connections to other nodes dials the address the client asked for again.
const ReturnInterval = time.Second

// What a Dialer logs when it falls back and when it returns.
const (
	LogFellBack = "This node's kube-apiserver did not answer: reached another control-plane node's"
	LogReturned = "This node's kube-apiserver answers again: closing the connections to other control-plane nodes'"
)

// Dialer dials the address a client asks for, and when that fails the other control-plane nodes' kube-apiservers at
// the same port, in the order they were set (apiserverendpoints: Ready nodes first). Every control-plane node's
// kube-apiserver serves the same certificate, Gardener's, which holds localhost: the client verifies each under the
// name it asked for, so TLS stays as strict as for its own node's.
type Dialer struct {
	self   netip.Addr
	dialer net.Dialer
	log    logr.Logger
	// returnInterval is ReturnInterval, shorter in tests.
	returnInterval time.Duration

	mu     sync.RWMutex
	others []netip.Addr
	// away are the open connections to other nodes; returning says a goroutine dials the asked-for address again.
	away      map[*awayConn]struct{}
	returning bool
}

// New returns a Dialer for a replica on the node with address self, which it never tries as another node's; it logs
// when it falls back and returns.
func New(self netip.Addr, log logr.Logger) *Dialer {
	return &Dialer{
		self: self.Unmap(), dialer: net.Dialer{Timeout: DialTimeout, KeepAlive: 30 * time.Second}, log: log,
		returnInterval: ReturnInterval, away: map[*awayConn]struct{}{},
	}
}

// SetControlPlane sets the control-plane nodes' kube-apiserver addresses.
func (d *Dialer) SetControlPlane(addresses []netip.Addr) {
	others := slices.DeleteFunc(slices.Clone(addresses), func(a netip.Addr) bool { return a.Unmap() == d.self })
	d.mu.Lock()
	defer d.mu.Unlock()
	d.others = others
}

// Others are the addresses the Dialer falls back to.
func (d *Dialer) Others() []netip.Addr {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return slices.Clone(d.others)
}

// DialContext is a rest.Config's Dial: address first, then each other control-plane node at address's port.
func (d *Dialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	others := d.Others()
	conn, err := d.first(others).DialContext(ctx, network, address)
	if err == nil {
		return conn, nil
	}
	_, port, splitErr := net.SplitHostPort(address)
	if splitErr != nil {
		return nil, err
	}
	errs := []error{err}
	for _, other := range others {
		if ctx.Err() != nil {
			break
		}
		conn, otherErr := d.dialer.DialContext(ctx, network, net.JoinHostPort(other.String(), port))
		if otherErr == nil {
			d.log.Info(LogFellBack, "address", conn.RemoteAddr().String(), "error", err.Error())
			return d.keepAway(conn, network, address), nil
		}
		errs = append(errs, otherErr)
	}
	return nil, errors.Join(errs...)
}

// first is the dialer of the address asked for: bounded by DialTimeout when others follow, by aloneDialTimeout when
// none does.
func (d *Dialer) first(others []netip.Addr) *net.Dialer {
	if len(others) > 0 {
		return &d.dialer
	}
	alone := d.dialer
	alone.Timeout = aloneDialTimeout
	return &alone
}

// awayConn is a connection to another node's kube-apiserver, which the Dialer closes once address answers.
type awayConn struct {
	net.Conn
	dialer *Dialer
	once   sync.Once
}

// Close implements net.Conn.
func (c *awayConn) Close() error {
	c.once.Do(func() {
		c.dialer.mu.Lock()
		delete(c.dialer.away, c)
		c.dialer.mu.Unlock()
	})
	return c.Conn.Close()
}

// keepAway registers conn, dialled instead of address, and starts dialling address again unless that runs already.
func (d *Dialer) keepAway(conn net.Conn, network, address string) net.Conn {
	c := &awayConn{Conn: conn, dialer: d}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.away[c] = struct{}{}
	if !d.returning {
		d.returning = true
		go d.returnTo(network, address)
	}
	return c
}

// returnTo dials address every returnInterval while connections to other nodes are open, and closes them once it
// answers: the clients dial again, and reach it.
func (d *Dialer) returnTo(network, address string) {
	for {
		time.Sleep(d.returnInterval)
		d.mu.Lock()
		if len(d.away) == 0 {
			d.returning = false
			d.mu.Unlock()
			return
		}
		d.mu.Unlock()
		conn, err := d.dialer.Dial(network, address)
		if err != nil {
			continue
		}
		conn.Close()
		d.mu.Lock()
		away := make([]*awayConn, 0, len(d.away))
		for c := range d.away {
			away = append(away, c)
		}
		d.returning = false
		d.mu.Unlock()
		d.log.Info(LogReturned, "address", address, "connections", len(away))
		for _, c := range away {
			c.Close()
		}
		return
	}
}
