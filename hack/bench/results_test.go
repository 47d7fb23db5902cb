// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSectionRunAloneKeepsTheOthers: running one section rewrites the day's results with that section's new figures
// and notes, and every other section's figures and notes as they were.
func TestSectionRunAloneKeepsTheOthers(t *testing.T) {
	dir := t.TempDir()
	earlier := &report{Date: "2026-12-01 10:00 UTC", Notes: []string{"Section 6, link down: old", "Section 8 did not run: no root"},
		Results: []Result{{Section: "6. failover", Name: "ARP", Value: 6}, {Section: "8. reconnect", Name: "old", Value: 50}}}
	if _, err := earlier.write(dir); err != nil {
		t.Fatal(err)
	}
	now := &report{Date: "2026-12-01 18:00 UTC", Results: []Result{{Section: "8. reconnect", Name: "new", Value: 9}}}
	if _, err := now.write(dir); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(dir, "results-2026-12-01.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| ARP |", "| new |", "Section 6, link down: old"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("the day's results lack %q:\n%s", want, md)
		}
	}
	for _, gone := range []string{"| old |", "Section 8 did not run"} {
		if strings.Contains(string(md), gone) {
			t.Errorf("the day's results still hold %q:\n%s", gone, md)
		}
	}
}
