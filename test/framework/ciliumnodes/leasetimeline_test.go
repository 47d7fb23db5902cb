// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package ciliumnodes

import (
	"testing"
	"time"
)

func TestMoveOf(t *testing.T) {
	start := time.Date(2026, 12, 2, 6, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return start.Add(time.Duration(ms) * time.Millisecond) }
	before := []LeaseVersion{
		{Holder: "cp-0", Acquired: at(-60000), Renewed: at(-900)},
		{Holder: "cp-0", Acquired: at(-60000), Renewed: at(-400)},
	}
	for _, tc := range []struct {
		name       string
		after      []LeaseVersion
		handedOver bool
		want       LeaseMove
	}{
		{"handed over, then renewed by the new holder's agent", []LeaseVersion{
			{Holder: "cp-1", Acquired: at(1300), Renewed: at(1300)},
			{Holder: "cp-1", Acquired: at(1300), Renewed: at(2100)},
			{Holder: "cp-1", Acquired: at(1300), Renewed: at(2600)},
		}, true, LeaseMove{LastRenewal: -400 * time.Millisecond, Moved: 1300 * time.Millisecond, TakenUp: 2100 * time.Millisecond}},
		{"expired and acquired by an agent", []LeaseVersion{
			{Holder: "cp-2", Acquired: at(5200), Renewed: at(5200)},
			{Holder: "cp-2", Acquired: at(5200), Renewed: at(5700)},
		}, false, LeaseMove{LastRenewal: -400 * time.Millisecond, Moved: 5200 * time.Millisecond, TakenUp: 5200 * time.Millisecond}},
		{"handed over, undone, acquired by another node", []LeaseVersion{
			{Holder: "cp-1", Acquired: at(1300), Renewed: at(1300)},
			{Holder: "", Acquired: at(2900), Renewed: at(2900)},
			{Holder: "cp-2", Acquired: at(3400), Renewed: at(3400)},
			{Holder: "cp-2", Acquired: at(3400), Renewed: at(3900)},
		}, true, LeaseMove{LastRenewal: -400 * time.Millisecond, Moved: 3400 * time.Millisecond, TakenUp: 3900 * time.Millisecond}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := moveOf(append(before, tc.after...), "cp-0", tc.after[len(tc.after)-1].Holder, start, tc.handedOver); got != tc.want {
				t.Errorf("moveOf = %+v, want %+v", got, tc.want)
			}
		})
	}
}
