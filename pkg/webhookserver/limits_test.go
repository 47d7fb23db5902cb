// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package webhookserver

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestSlowBodyIsCutOff: a caller that sends its header and then trickles its body loses the connection once the read
// timeout passes; the handler sees the read fail instead of waiting for the caller.
func TestSlowBodyIsCutOff(t *testing.T) {
	readErr := make(chan error, 1)
	s := NewLimiter(Limits{ReadTimeout: 200 * time.Millisecond, HandleTimeout: time.Second, InFlight: 4})
	srv := httptest.NewServer(s.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, err := io.ReadAll(r.Body)
		readErr <- err
	})))
	defer srv.Close()

	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := fmt.Fprintf(conn, "POST /mutate HTTP/1.1\r\nHost: webhook\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"kind\":"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-readErr:
		if err == nil {
			t.Fatal("the handler read a whole body that was never sent")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the handler still waits for the body")
	}
	// The server has closed the connection: the read ends with EOF or a reset, not with the client's own deadline.
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.ReadAll(conn); err != nil && !errors.Is(err, net.ErrClosed) && !strings.Contains(err.Error(), "reset") {
		t.Errorf("the connection stays open: %v", err)
	}
}

// TestRequestsBeyondInFlightWait: with one slot taken, another request does not reach its handler and is answered 503
// after the wait bound; once the slot is free, the next request is handled.
func TestRequestsBeyondInFlightWait(t *testing.T) {
	var entered atomic.Int32
	release := make(chan struct{})
	s := NewLimiter(Limits{ReadTimeout: 300 * time.Millisecond, HandleTimeout: 5 * time.Second, InFlight: 1})
	srv := httptest.NewServer(s.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if entered.Add(1) == 1 {
			<-release
		}
		w.WriteHeader(http.StatusOK)
	})))
	defer srv.Close()

	first := make(chan error, 1)
	go func() {
		resp, err := http.Post(srv.URL, "application/json", strings.NewReader("{}"))
		if err == nil {
			resp.Body.Close()
		}
		first <- err
	}()
	for entered.Load() == 0 {
		select {
		case err := <-first:
			t.Fatalf("the first request ended before its handler held the slot: %v", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	resp, err := http.Post(srv.URL, "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("a request beyond the slots was answered %s while the slot was held, want 503", resp.Status)
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if resp, err = http.Post(srv.URL, "application/json", strings.NewReader("{}")); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if n := entered.Load(); n != 2 {
		t.Errorf("%d requests reached the handler, want the first and the one after the slot was freed", n)
	}
}
