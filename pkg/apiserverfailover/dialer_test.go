// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package apiserverfailover

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/util/wait"
)

// listen opens a listener at ip on port ("0": any) and returns it with its port.
func listen(t *testing.T, ip, port string) (net.Listener, string) {
	t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort(ip, port))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	_, p, _ := net.SplitHostPort(l.Addr().String())
	return l, p
}

func dialedAddress(t *testing.T, d *Dialer, address string) string {
	t.Helper()
	conn, err := d.DialContext(context.Background(), "tcp", address)
	if err != nil {
		t.Fatalf("dialing %s: %v", address, err)
	}
	defer conn.Close()
	return conn.RemoteAddr().String()
}

func TestDialsTheAddressAskedForFirst(t *testing.T) {
	_, port := listen(t, "127.0.0.1", "0")
	listen(t, "127.0.0.2", port)
	d := New(netip.MustParseAddr("127.0.0.10"), logr.Discard())
	d.SetControlPlane([]netip.Addr{netip.MustParseAddr("127.0.0.2")})
	if got, want := dialedAddress(t, d, "127.0.0.1:"+port), "127.0.0.1:"+port; got != want {
		t.Errorf("dialed %s, want %s", got, want)
	}
}

func TestFallsBackToTheOtherControlPlaneNodesInOrder(t *testing.T) {
	// Nothing listens at 127.0.0.1 and 127.0.0.3 on the port: refused, as a stopped kube-apiserver's port is.
	_, port := listen(t, "127.0.0.4", "0")
	listen(t, "127.0.0.5", port)
	d := New(netip.MustParseAddr("127.0.0.10"), logr.Discard())
	d.SetControlPlane([]netip.Addr{netip.MustParseAddr("127.0.0.3"), netip.MustParseAddr("127.0.0.4"), netip.MustParseAddr("127.0.0.5")})
	if got, want := dialedAddress(t, d, "127.0.0.1:"+port), "127.0.0.4:"+port; got != want {
		t.Errorf("dialed %s, want the first control-plane node that answers, %s", got, want)
	}
}

func TestNeverFallsBackToItsOwnNode(t *testing.T) {
	d := New(netip.MustParseAddr("127.0.0.10"), logr.Discard())
	d.SetControlPlane([]netip.Addr{netip.MustParseAddr("127.0.0.10"), netip.MustParseAddr("::ffff:127.0.0.11"), netip.MustParseAddr("127.0.0.12")})
	if got, want := d.Others(), []netip.Addr{netip.MustParseAddr("::ffff:127.0.0.11"), netip.MustParseAddr("127.0.0.12")}; !slices.Equal(got, want) {
		t.Errorf("falls back to %v, want %v", got, want)
	}
}

func TestNamesEveryAddressItTriedWhenNoneAnswers(t *testing.T) {
	_, port := listen(t, "127.0.0.6", "0")
	d := New(netip.MustParseAddr("127.0.0.10"), logr.Discard())
	d.SetControlPlane([]netip.Addr{netip.MustParseAddr("127.0.0.7"), netip.MustParseAddr("127.0.0.8")})
	_, err := d.DialContext(context.Background(), "tcp", "127.0.0.1:"+port)
	if err == nil {
		t.Fatal("dialed although nothing listens")
	}
	for _, a := range []string{"127.0.0.1:" + port, "127.0.0.7:" + port, "127.0.0.8:" + port} {
		if !strings.Contains(err.Error(), a) {
			t.Errorf("the error %q does not name %s", err, a)
		}
	}
}

func TestStopsFallingBackWhenTheCallerGivesUp(t *testing.T) {
	_, port := listen(t, "127.0.0.9", "0")
	d := New(netip.MustParseAddr("127.0.0.10"), logr.Discard())
	d.SetControlPlane([]netip.Addr{netip.MustParseAddr("127.0.0.9")})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if conn, err := d.DialContext(ctx, "tcp", "127.0.0.1:"+port); err == nil {
		conn.Close()
		t.Error("dialed for a caller that gave up")
	}
}

// holdingListener accepts connections at ip on port ("0": any) and keeps them open, as a kube-apiserver does.
func holdingListener(t *testing.T, ip, port string) string {
	t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort(ip, port))
	if err != nil {
		t.Fatal(err)
	}
	var held []net.Conn
	var mu sync.Mutex
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			c.Close()
		}
	})
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()
	_, p, _ := net.SplitHostPort(l.Addr().String())
	return p
}

// closed says whether conn was closed on this side: a read deadline in the past reports that before a timeout.
func closed(conn net.Conn) bool {
	_ = conn.SetReadDeadline(time.Now())
	_, err := conn.Read(make([]byte, 1))
	return errors.Is(err, net.ErrClosed)
}

// TestReturnsToItsOwnNodeOnceItAnswers: a connection that fell back to another node is closed once the address asked
// for answers again, so that the client's next dial reaches it; while it does not answer, the connection stays open.
func TestReturnsToItsOwnNodeOnceItAnswers(t *testing.T) {
	port := holdingListener(t, "127.0.0.12", "0")
	d := New(netip.MustParseAddr("127.0.0.10"), logr.Discard())
	d.returnInterval = 10 * time.Millisecond
	d.SetControlPlane([]netip.Addr{netip.MustParseAddr("127.0.0.12")})
	conn, err := d.DialContext(context.Background(), "tcp", "127.0.0.11:"+port)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if got, want := conn.RemoteAddr().String(), "127.0.0.12:"+port; got != want {
		t.Fatalf("dialed %s, want the other node %s", got, want)
	}
	// Ten tries of the own node, refused: the connection stays.
	if err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 10*d.returnInterval, true, func(context.Context) (bool, error) {
		return closed(conn), nil
	}); err == nil {
		t.Fatal("closed the connection to the other node while the own node's kube-apiserver did not answer")
	}
	holdingListener(t, "127.0.0.11", port)
	if err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return closed(conn), nil
	}); err != nil {
		t.Fatalf("the connection to the other node stayed open after the own node answered: %v", err)
	}
	if got, want := dialedAddress(t, d, "127.0.0.11:"+port), "127.0.0.11:"+port; got != want {
		t.Errorf("dialed %s after the return, want %s", got, want)
	}
}

// TestWaitsLongerWhenThereIsNoOtherNode: the address asked for gets DialTimeout while other nodes follow, and
// client-go's own timeout when none does: a slow start must not fail for want of a node to fall back to.
func TestWaitsLongerWhenThereIsNoOtherNode(t *testing.T) {
	d := New(netip.MustParseAddr("10.0.1.10"), logr.Discard())
	if got := d.first(d.Others()).Timeout; got != aloneDialTimeout {
		t.Errorf("with no other node: %s, want %s", got, aloneDialTimeout)
	}
	d.SetControlPlane([]netip.Addr{netip.MustParseAddr("10.0.1.10"), netip.MustParseAddr("10.0.1.11")})
	if got := d.first(d.Others()).Timeout; got != DialTimeout {
		t.Errorf("with another node: %s, want %s", got, DialTimeout)
	}
}
