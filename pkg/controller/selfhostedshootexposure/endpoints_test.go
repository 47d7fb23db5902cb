// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package selfhostedshootexposure

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	v1beta1helper "github.com/gardener/gardener/pkg/api/core/v1beta1/helper"
	gardencorev1beta1 "github.com/gardener/gardener/pkg/apis/core/v1beta1"
	extensionsv1alpha1 "github.com/gardener/gardener/pkg/apis/extensions/v1alpha1"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/exposure/health"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/scheme"
)

// TestReportEndpoints: over a sequence of probe results, the condition EndpointsReady says which endpoints are out and
// why, that all stay published when every probe fails, and a single control-plane node's state; each change of the
// condition, and only a change, is an event.
func TestReportEndpoints(t *testing.T) {
	ready := health.State{Ready: true}
	refused := health.State{Reason: "dial tcp 10.0.1.11:443: connect: connection refused"}
	exp := &extensionsv1alpha1.SelfHostedShootExposure{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "bare-metal"}}
	c := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(exp).WithStatusSubresource(exp).Build()
	recorder := events.NewFakeRecorder(10)
	a := &actuator{client: c, recorder: recorder}

	for _, step := range []struct {
		name     string
		states   map[string]health.State
		status   gardencorev1beta1.ConditionStatus
		reason   string
		mentions []string
		omits    []string
		event    bool
	}{
		{"all ready", map[string]health.State{"10.0.1.10:443": ready, "10.0.1.11:443": ready},
			gardencorev1beta1.ConditionTrue, reasonEndpointsReady, []string{"all 2"}, nil, false},
		{"still all ready", map[string]health.State{"10.0.1.10:443": ready, "10.0.1.11:443": ready},
			gardencorev1beta1.ConditionTrue, reasonEndpointsReady, []string{"all 2"}, nil, false},
		{"one out", map[string]health.State{"10.0.1.10:443": ready, "10.0.1.11:443": refused},
			gardencorev1beta1.ConditionFalse, reasonEndpointsNotReady, []string{"10.0.1.11:443 (dial tcp", "connection refused", "Ready: 1 of 2"}, []string{"10.0.1.10:443"}, true},
		{"all out", map[string]health.State{"10.0.1.10:443": refused, "10.0.1.11:443": refused},
			gardencorev1beta1.ConditionFalse, reasonProbesFailing, []string{"all stay published", "10.0.1.10:443", "10.0.1.11:443"}, nil, true},
		{"back", map[string]health.State{"10.0.1.10:443": ready, "10.0.1.11:443": ready},
			gardencorev1beta1.ConditionTrue, reasonEndpointsReady, nil, nil, true},
		{"a single control-plane node out", map[string]health.State{"10.0.1.10:443": refused},
			gardencorev1beta1.ConditionFalse, reasonProbesFailing, []string{"the only endpoint", "stays published", "connection refused"}, nil, true},
	} {
		notReady, allFailing := health.Publish(step.states)
		if err := a.reportEndpoints(context.Background(), exp, step.states, notReady, allFailing); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		stored := &extensionsv1alpha1.SelfHostedShootExposure{}
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(exp), stored); err != nil {
			t.Fatal(err)
		}
		cond := v1beta1helper.GetCondition(stored.Status.Conditions, ConditionEndpointsReady)
		if cond == nil || cond.Status != step.status || cond.Reason != step.reason {
			t.Fatalf("%s: condition %+v, want %s with reason %s", step.name, cond, step.status, step.reason)
		}
		for _, m := range step.mentions {
			if !strings.Contains(cond.Message, m) {
				t.Errorf("%s: condition %q does not say %q", step.name, cond.Message, m)
			}
		}
		for _, m := range step.omits {
			if strings.Contains(cond.Message, m) {
				t.Errorf("%s: condition %q names %q", step.name, cond.Message, m)
			}
		}
		select {
		case e := <-recorder.Events:
			if !step.event {
				t.Errorf("%s: event %q although nothing changed", step.name, e)
			} else if !strings.Contains(e, step.reason) {
				t.Errorf("%s: event %q, want reason %s", step.name, e, step.reason)
			}
		default:
			if step.event {
				t.Errorf("%s: no event for the change", step.name)
			}
		}
	}
}
