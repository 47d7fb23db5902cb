// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package ciliumnodes

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestNewMessages: the messages of the events that are new, in the order of their names; none when nothing is.
func TestNewMessages(t *testing.T) {
	event := func(message string) corev1.Event { return corev1.Event{Message: message} }
	before := map[string]corev1.Event{"a": event("from cp-0 to cp-1")}
	for _, tc := range []struct {
		now  map[string]corev1.Event
		want []string
	}{
		{before, nil},
		{map[string]corev1.Event{"a": event("from cp-0 to cp-1"), "c": event("from cp-1 to cp-2"), "b": event("from cp-2 to cp-0")},
			[]string{"from cp-2 to cp-0", "from cp-1 to cp-2"}},
		{map[string]corev1.Event{}, nil},
	} {
		if got := newMessages(before, tc.now); !slices.Equal(got, tc.want) {
			t.Errorf("newMessages(%v, %v) = %q, want %q", before, tc.now, got, tc.want)
		}
	}
}
