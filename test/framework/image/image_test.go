// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package image

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/repo"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/testenv"
)

// TestImageNameAsBuilt: the suites name the image as make image names it (hack/image/build.sh), so that a chart
// rendered for them names the image that was built.
func TestImageNameAsBuilt(t *testing.T) {
	top, err := repo.Root()
	if err != nil {
		t.Fatal(err)
	}
	script, err := os.ReadFile(filepath.Join(top, "hack/image/build.sh"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "\nname=" + testenv.ImageRepository + ":$version\n"; !strings.Contains(string(script), want) {
		t.Errorf("hack/image/build.sh names the image otherwise than testenv.ImageRepository %s: want the line %q", testenv.ImageRepository, strings.TrimSpace(want))
	}
}
