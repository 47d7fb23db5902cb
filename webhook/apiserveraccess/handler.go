// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package apiserveraccess

import (
	"context"
	"fmt"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	extensionswebhook "github.com/gardener/gardener/extensions/pkg/webhook"
)

// handler is Gardener's generic handler (extensions/pkg/webhook handler.go: decode, mutate, answer with the JSON diff)
// held to two guarantees of its own. It never denies: Gardener's handler answers an error with a denial, which
// kube-apiserver enforces whatever the failurePolicy and which would keep Cilium, and with it the cluster's network,
// from coming up; the object then runs as its chart made it, as with the webhook unreachable. And its patch changes
// only what the kind lets a mutation change (kind.mutable). docs/development/webhook-handler.md has the measurement
// behind using the generic handler.
type handler struct {
	// name is the webhook's name, for logs and metrics.
	name    string
	generic admission.Handler
}

// newHandler is the handler of the webhook name over Gardener's generic handler with mutator, for objs.
func newHandler(mgr manager.Manager, name string, mutator extensionswebhook.Mutator, objs ...client.Object) (*handler, error) {
	types := make([]extensionswebhook.Type, 0, len(objs))
	for _, obj := range objs {
		types = append(types, extensionswebhook.Type{Obj: obj})
	}
	generic, err := extensionswebhook.NewBuilder(mgr, logr.Discard()).WithMutator(mutator, types...).Build()
	if err != nil {
		return nil, err
	}
	return &handler{name: name, generic: generic}, nil
}

// admissionErrors counts the admissions answered without changes after an internal error.
var admissionErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "cilium_selfhosted_webhook_admission_errors_total",
	Help: "Admissions of Cilium's objects answered allowed without changes after an internal error of the webhook.",
}, []string{"webhook"})

func init() {
	metrics.Registry.MustRegister(admissionErrors)
}

// Handle answers as Gardener's generic handler does, but allowed without a patch, logged and counted in
// admissionErrors, whatever goes wrong inside: a request it cannot decode, a failed read, a panic, a patch outside the
// kind's fields.
func (h *handler) Handle(ctx context.Context, req admission.Request) (resp admission.Response) {
	defer func() {
		// controller-runtime's RecoverPanic would answer a panic with an error, which kube-apiserver takes as a denial.
		if r := recover(); r != nil {
			resp = h.allowAfterError(ctx, req, fmt.Errorf("panic: %v", r))
		}
	}()
	k := kindNamed(req.Kind.Kind)
	if k == nil {
		return h.allowAfterError(ctx, req, fmt.Errorf("unexpected kind %s", req.Kind.Kind))
	}
	resp = h.generic.Handle(ctx, req)
	if !resp.Allowed {
		return h.allowAfterError(ctx, req, fmt.Errorf("%s", resp.Result.Message))
	}
	for _, op := range resp.Patches {
		if !k.mutable(op.Path) {
			return h.allowAfterError(ctx, req, fmt.Errorf("the mutation of %s %s changed %s, which it may not change", k.name, req.Name, op.Path))
		}
	}
	return resp
}

func (h *handler) allowAfterError(ctx context.Context, req admission.Request, err error) admission.Response {
	logf.FromContext(ctx).Info("Warning: admitting without changes after an internal error", "webhook", h.name,
		"kind", req.Kind.Kind, "namespace", req.Namespace, "name", req.Name, "error", err.Error())
	admissionErrors.WithLabelValues(h.name).Inc()
	return admission.Allowed("not changed after an internal error of " + h.name + ": " + err.Error())
}
