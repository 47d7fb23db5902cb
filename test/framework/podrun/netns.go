// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package podrun

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/reaper"
)

// Netns is a network namespace of the test's own, created with only a loopback interface: the processes started in it
// stand for Cilium's pods on a node, and whatever they dial that the test does not serve there fails, never reaching
// the machine's network.
type Netns struct {
	name string
}

// NewNetns creates the namespace name with loopback up and addresses (CIDRs) on it.
func NewNetns(name string, addresses ...string) (*Netns, error) {
	n := &Netns{name: name}
	if err := runCommand("ip", "netns", "add", name); err != nil {
		return nil, err
	}
	reaper.NetNS(name)
	if err := runCommand("ip", "-n", name, "link", "set", "lo", "up"); err != nil {
		n.Delete()
		return nil, err
	}
	for _, a := range addresses {
		if err := runCommand("ip", "-n", name, "addr", "add", a, "dev", "lo"); err != nil {
			n.Delete()
			return nil, err
		}
	}
	return n, nil
}

// Delete removes the namespace.
func (n *Netns) Delete() { _ = runCommand("ip", "netns", "delete", n.name) }

// Name is the namespace's name for `ip netns`.
func (n *Netns) Name() string { return n.name }

// IP runs `ip` with args inside the namespace.
func (n *Netns) IP(args ...string) error {
	return runCommand("ip", append([]string{"-n", n.name}, args...)...)
}

// Listen opens a TCP listener inside the namespace: the socket keeps the namespace it was created in.
func (n *Netns) Listen(addr string) (net.Listener, error) {
	var l net.Listener
	err := n.do(func() (err error) {
		l, err = net.Listen("tcp", addr)
		return err
	})
	return l, err
}

// DialContext dials from inside the namespace, as a process there (kubelet's probes of a hostNetwork pod) would.
func (n *Netns) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := n.do(func() (err error) {
		c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

// Do runs f on a thread switched into the namespace; sockets f creates stay there.
func (n *Netns) Do(f func() error) error { return n.do(f) }

func (n *Netns) do(f func() error) error {
	target, err := os.Open("/run/netns/" + n.name)
	if err != nil {
		return err
	}
	defer target.Close()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	self, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
	if err != nil {
		return err
	}
	defer self.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		return err
	}
	fErr := f()
	if err := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); err != nil {
		// The thread is in the wrong namespace: let it die with its goroutine rather than serve anyone else.
		runtime.Goexit()
	}
	return fErr
}

// Command runs name with args inside the namespace.
func (n *Netns) Command(name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", n.name, name}, args...)...)
}

func runCommand(name string, args ...string) error {
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("%s %v: %w: %s", name, args, err, out)
	}
	return nil
}

// endpoint is an address inside the namespace: a TCP proxy to kube-apiserver standing for the kube-apiserver of a
// node (forward), or a trap that only counts who dials it (the ClusterIP, the VIP). It can be switched off, which
// refuses connections as a node's dead kube-apiserver does.
type Endpoint struct {
	addr    string
	forward string
	ns      *Netns
	// into is the namespace forward lies in, when it is not the machine's own (NewRoute).
	into *Netns

	mu       sync.Mutex
	listener net.Listener
	conns    []net.Conn
	accepted int
	from     map[string]int
	// sent is when the endpoint last forwarded bytes to each client address.
	sent map[string]time.Time
	// open counts the forwarded connections that have not ended.
	open atomic.Int32
}

// NewEndpoint is an endpoint at addr inside ns (in the machine's own namespace when ns is nil) that forwards to
// forward, or only counts and closes when forward is empty. It listens once started.
func NewEndpoint(ns *Netns, addr, forward string) *Endpoint {
	return &Endpoint{addr: addr, forward: forward, ns: ns}
}

// NewRoute is an endpoint at addr on this machine that forwards to forward inside the namespace into: the network
// between kube-apiserver and a hostNetwork pod on a node.
func NewRoute(addr string, into *Netns, forward string) *Endpoint {
	return &Endpoint{addr: addr, forward: forward, into: into}
}

// Start listens and serves.
func (e *Endpoint) Start() error {
	listen := func(addr string) (net.Listener, error) { return net.Listen("tcp", addr) }
	if e.ns != nil {
		listen = e.ns.Listen
	}
	l, err := listen(e.addr)
	if err != nil {
		return err
	}
	e.mu.Lock()
	e.listener = l
	e.mu.Unlock()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			e.mu.Lock()
			e.accepted++
			if e.from == nil {
				e.from = map[string]int{}
			}
			host, _, err := net.SplitHostPort(c.RemoteAddr().String())
			if err == nil {
				e.from[host]++
			}
			e.conns = append(e.conns, c)
			e.mu.Unlock()
			if e.forward == "" {
				_ = c.Close()
				continue
			}
			e.open.Add(1)
			go func() {
				defer e.open.Add(-1)
				pipe(c, e.dial, func() { e.stampSent(host) })
			}()
		}
	}()
	return nil
}

// dial connects to where the endpoint forwards.
func (e *Endpoint) dial() (net.Conn, error) {
	if e.into != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return e.into.DialContext(ctx, "tcp", e.forward)
	}
	return net.Dial("tcp", e.forward)
}

// Stop closes the listener and every connection it accepted.
func (e *Endpoint) Stop() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.listener != nil {
		_ = e.listener.Close()
		e.listener = nil
	}
	e.closeConnections()
}

// ResetConnections resets every connection the endpoint accepted (an RST, as a middlebox or a firewall that dropped
// the flow sends) and keeps listening.
func (e *Endpoint) ResetConnections() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, c := range e.conns {
		if tcp, ok := c.(*net.TCPConn); ok {
			_ = tcp.SetLinger(0) // Close sends an RST instead of a FIN
		}
	}
	e.closeConnections()
}

func (e *Endpoint) closeConnections() {
	for _, c := range e.conns {
		_ = c.Close()
	}
	e.conns = nil
}

// Open is how many forwarded connections have not ended.
func (e *Endpoint) Open() int { return int(e.open.Load()) }

// Count is how many connections the endpoint accepted; Reset sets it to zero.
func (e *Endpoint) Count() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.accepted
}

// From counts the connections accepted since the last Reset by the client's address.
func (e *Endpoint) From() map[string]int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return maps.Clone(e.from)
}

// LastSentTo is when the endpoint last forwarded bytes to a client at ip: kube-apiserver's last frame to it.
func (e *Endpoint) LastSentTo(ip string) time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.sent[ip]
}

func (e *Endpoint) stampSent(host string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.sent == nil {
		e.sent = map[string]time.Time{}
	}
	e.sent[host] = time.Now()
}

func (e *Endpoint) Reset() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.accepted = 0
	e.from = nil
}

// pipe forwards c to the connection dial makes and back; sent is called after each write to c.
func pipe(c net.Conn, dial func() (net.Conn, error), sent func()) {
	defer c.Close()
	upstream, err := dial()
	if err != nil {
		return
	}
	defer upstream.Close()
	done := make(chan struct{}, 2)
	cp := func(dst io.Writer, src io.Reader) {
		_, _ = io.Copy(dst, src)
		done <- struct{}{}
	}
	go cp(upstream, c)
	go cp(stampedWriter{c, sent}, upstream)
	<-done
}

// stampedWriter calls stamp after each write that wrote something.
type stampedWriter struct {
	io.Writer
	stamp func()
}

func (w stampedWriter) Write(p []byte) (int, error) {
	n, err := w.Writer.Write(p)
	if n > 0 {
		w.stamp()
	}
	return n, err
}
