// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package identity_test

import (
	"strings"
	"testing"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/identity"
)

// TestEventNote: a note longer than kube-apiserver accepts is cut to 1024 bytes, a short one kept.
func TestEventNote(t *testing.T) {
	if got := identity.EventNote(strings.Repeat("x", 3000)); len(got) != 1024 {
		t.Errorf("a note of 3000 bytes became %d bytes, want 1024", len(got))
	}
	if got := identity.EventNote("short"); got != "short" {
		t.Errorf("a short note became %q", got)
	}
}
