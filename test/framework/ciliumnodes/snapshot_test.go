// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package ciliumnodes

import (
	"slices"
	"testing"
)

func TestSnapshotChanges(t *testing.T) {
	before := Snapshot{"cp-0's routes": "default via 10.250.0.1\n", "Node cp-0": `{"labels":{"a":"b"}}`}
	for _, tc := range []struct {
		name  string
		after Snapshot
		want  []string
	}{
		{name: "the same", after: Snapshot{"cp-0's routes": "default via 10.250.0.1\n", "Node cp-0": `{"labels":{"a":"b"}}`}},
		{
			name:  "a value changed",
			after: Snapshot{"cp-0's routes": "default via 10.250.0.1\n", "Node cp-0": `{"labels":{"a":"c"}}`},
			want:  []string{"Node cp-0: was\n{\"labels\":{\"a\":\"b\"}}\nnow\n{\"labels\":{\"a\":\"c\"}}"},
		},
		{
			name:  "a key gone",
			after: Snapshot{"Node cp-0": `{"labels":{"a":"b"}}`},
			want:  []string{"cp-0's routes: was\ndefault via 10.250.0.1\n\nnow\n"},
		},
		{
			name: "a key added, sorted before a change",
			after: Snapshot{
				"cp-0's routes": "default via 10.250.0.1\n", "Node cp-0": `{"labels":{"a":"b"}}`,
				"Node cp-1": "{}", "agents that ended by themselves": "1",
			},
			want: []string{"Node cp-1: was\n\nnow\n{}", "agents that ended by themselves: was\n\nnow\n1"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := before.Changes(tc.after); !slices.Equal(got, tc.want) {
				t.Errorf("Changes = %q, want %q", got, tc.want)
			}
		})
	}
}
