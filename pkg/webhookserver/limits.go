// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

// Package webhookserver bounds what a caller can hold of the webhook server. On a self-hosted shoot the server listens
// in the host network of the control-plane nodes, next to etcd and kube-apiserver, and anyone on the node network can
// connect; controller-runtime bounds a request's header (ReadHeaderTimeout 32 s, MaxHeaderBytes 1 MiB,
// pkg/internal/httpserver) and its body's size (7 MiB, pkg/webhook/admission/http.go maxRequestSize), but neither how
// long a body may take to arrive nor how many bodies are buffered at once.
package webhookserver

import (
	"net/http"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/webhook"
)

// Limits bound the requests of all webhooks of one server together.
type Limits struct {
	// ReadTimeout bounds the time from the handler's start to the end of the request body; HandleTimeout the time
	// after that until the response is written. kube-apiserver gives up on the webhook after its timeoutSeconds anyway.
	ReadTimeout, HandleTimeout time.Duration
	// InFlight is how many requests are read and handled at once; the others wait, holding their connection and
	// header but no body, for at most ReadTimeout, and are then answered 503: their caller has given up by then.
	InFlight int
}

// Servers are two controller-runtime webhook servers on one mux: Registering takes the webhooks (Gardener's wiring
// needs a *webhook.DefaultServer to register on and to read its port and certificate directory from) and never
// starts; Serving, which the manager starts, serves them all through the limits. Both have the same options, so
// that the certificate Gardener's reloader writes into the directory is the one Serving's certificate watcher loads.
type Servers struct {
	Registering, Serving *webhook.DefaultServer
}

// New returns the Servers for options, held to limits.
func New(options webhook.Options, limits Limits) Servers {
	registered := http.NewServeMux()
	served := http.NewServeMux()
	served.Handle("/", NewLimiter(limits).Handler(registered))
	registering, serving := options, options
	registering.WebhookMux, serving.WebhookMux = registered, served
	return Servers{
		Registering: webhook.NewServer(registering).(*webhook.DefaultServer),
		Serving:     webhook.NewServer(serving).(*webhook.DefaultServer),
	}
}

// Limiter holds handlers to Limits, all of them together.
type Limiter struct {
	limits Limits
	slots  chan struct{}
}

// NewLimiter returns a Limiter for limits.
func NewLimiter(limits Limits) *Limiter {
	return &Limiter{limits: limits, slots: make(chan struct{}, max(limits.InFlight, 1))}
}

// Handler holds hook to the limits.
func (s *Limiter) Handler(hook http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Deadlines on the connection, not a context: reading the body is what a slow caller stretches, and only a
		// read deadline ends a read that blocks. One from the start, so that not even the answer to a caller who gets
		// no slot (net/http reads what is left of its body) waits on it for longer.
		rc := http.NewResponseController(w)
		_ = rc.SetReadDeadline(time.Now().Add(2 * s.limits.ReadTimeout))
		_ = rc.SetWriteDeadline(time.Now().Add(2*s.limits.ReadTimeout + s.limits.HandleTimeout))
		// A caller that gave up while waiting is not noticed (net/http watches the connection only once the body has
		// been read): the wait is bounded instead.
		wait := time.NewTimer(s.limits.ReadTimeout)
		defer wait.Stop()
		select {
		case s.slots <- struct{}{}:
		case <-wait.C:
			http.Error(w, "too many admission requests at once", http.StatusServiceUnavailable)
			return
		case <-r.Context().Done():
			return
		}
		defer func() { <-s.slots }()
		start := time.Now()
		_ = rc.SetReadDeadline(start.Add(s.limits.ReadTimeout))
		_ = rc.SetWriteDeadline(start.Add(s.limits.ReadTimeout + s.limits.HandleTimeout))
		hook.ServeHTTP(w, r)
	})
}
