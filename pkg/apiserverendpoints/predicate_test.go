// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package apiserverendpoints

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"
)

// TestMembershipChanged: a control-plane node's readiness reorders the endpoints and passes; its heartbeats, and
// any change of a worker, do not.
func TestMembershipChanged(t *testing.T) {
	ready := func(controlPlane bool, status corev1.ConditionStatus, heartbeat time.Time) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: map[string]string{}}}
		if controlPlane {
			n.Labels["node-role.kubernetes.io/control-plane"] = ""
		}
		n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.1"}}
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status, LastHeartbeatTime: metav1.NewTime(heartbeat)}}
		return n
	}
	now := time.Now()
	for _, tc := range []struct {
		name     string
		old, new *corev1.Node
		want     bool
	}{
		{"control-plane node becomes NotReady", ready(true, corev1.ConditionTrue, now), ready(true, corev1.ConditionFalse, now), true},
		{"control-plane node becomes Unknown", ready(true, corev1.ConditionTrue, now), ready(true, corev1.ConditionUnknown, now), true},
		{"control-plane node becomes Ready", ready(true, corev1.ConditionUnknown, now), ready(true, corev1.ConditionTrue, now), true},
		{"control-plane node's heartbeat", ready(true, corev1.ConditionTrue, now), ready(true, corev1.ConditionTrue, now.Add(time.Minute)), false},
		{"worker becomes NotReady", ready(false, corev1.ConditionTrue, now), ready(false, corev1.ConditionFalse, now), false},
	} {
		if got := MembershipChanged.Update(event.UpdateEvent{ObjectOld: tc.old, ObjectNew: tc.new}); got != tc.want {
			t.Errorf("%s: passes %t, want %t", tc.name, got, tc.want)
		}
	}
}
