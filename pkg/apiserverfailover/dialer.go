// Package apiserverfailover is how the extension's own clients reach kube-apiserver on a self-hosted shoot: their
// node's kube-apiserver at localhost (KUBERNETES_SERVICE_HOST in the extension's chart), and when that cannot be
// reached, the other control-plane nodes' kube-apiservers. Without it a replica whose node's kube-apiserver stopped is
// blind: a leader there could neither take that kube-apiserver out of the exposure nor hand its terms over before its
// lease expired, while the kube-apiserver on the next node serves.
package apiserverfailover

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"
)

// DialTimeout bounds each address a dial tries: loopback and the nodes' network answer within milliseconds, and a
// node that is gone must not hold up the next one.
const DialTimeout = time.Second

// Dialer dials the address a client asks for, and when that fails the other control-plane nodes' kube-apiservers at
// the same port, in the order they were set (apiserverendpoints: Ready nodes first). Every control-plane node's
// kube-apiserver serves the same certificate, Gardener's, which holds localhost: the client verifies each under the
// name it asked for, so TLS stays as strict as for its own node's.
type Dialer struct {
	self   netip.Addr
	dialer net.Dialer

	mu     sync.RWMutex
	others []netip.Addr
}

// New returns a Dialer for a replica on the node with address self, which it never tries as another node's.
func New(self netip.Addr) *Dialer {
	return &Dialer{self: self.Unmap(), dialer: net.Dialer{Timeout: DialTimeout, KeepAlive: 30 * time.Second}}
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
	conn, err := d.dialer.DialContext(ctx, network, address)
	if err == nil {
		return conn, nil
	}
	_, port, splitErr := net.SplitHostPort(address)
	if splitErr != nil {
		return nil, err
	}
	errs := []error{err}
	for _, other := range d.Others() {
		if ctx.Err() != nil {
			break
		}
		conn, err := d.dialer.DialContext(ctx, network, net.JoinHostPort(other.String(), port))
		if err == nil {
			return conn, nil
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}
