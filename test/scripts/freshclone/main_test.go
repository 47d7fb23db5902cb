// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package freshclone

import (
	"os"
	"testing"

	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/reaper"
)

// TestMain confines the suite: the `go test` runs in the clone and what they build and start die with it.
func TestMain(m *testing.M) {
	reaper.ConfineOrWarn()
	os.Exit(m.Run())
}
