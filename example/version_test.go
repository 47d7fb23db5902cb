// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package example

import (
	"bytes"
	"context"
	"os/exec"
	"strings"
	"testing"

	"helm.sh/helm/v4/pkg/chart/v2/loader"

	"github.com/gardener/gardener-extension-cilium-selfhosted/charts"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/helm"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/testenv"
)

// TestOneVersion: VERSION is the version of everything that carries one: the binary (--version, as hack/build.sh
// builds it for the image and the suites), the chart (version and appVersion, VERSION without its "v") and its
// default image tag, and the chart inlined in the generated registration. The image's version label (hack/image/build.sh
// passes VERSION) is checked by make push, which refuses an image whose label disagrees (test/image/publish).
func TestOneVersion(t *testing.T) {
	version := strings.TrimSpace(string(read(t, "../VERSION")))
	if !strings.HasPrefix(version, "v") {
		t.Fatalf("VERSION %q: want a version such as v1.2.3", version)
	}
	chartVersion := strings.TrimPrefix(version, "v")

	chart, err := helm.LoadFS(charts.FS, charts.ChartPath)
	if err != nil {
		t.Fatal(err)
	}
	if chart.Metadata.Version != chartVersion || chart.Metadata.AppVersion != chartVersion {
		t.Errorf("Chart.yaml version %s, appVersion %s; want %s (VERSION %s)", chart.Metadata.Version, chart.Metadata.AppVersion, chartVersion, version)
	}
	if tag := chart.Values["image"].(map[string]any)["tag"]; tag != version {
		t.Errorf("values.yaml image.tag %v, want VERSION %s", tag, version)
	}

	deployment, _ := registration(t)
	inlined, err := loader.LoadArchive(bytes.NewReader(deployment.Helm.RawChart))
	if err != nil {
		t.Fatal(err)
	}
	if inlined.Metadata.Version != chartVersion {
		t.Errorf("controller-registration.yaml inlines the chart of version %s, want %s: run `make generate`", inlined.Metadata.Version, chartVersion)
	}

	binary, err := testenv.BuildExtension()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(context.Background(), binary, "--version").Output()
	if err != nil {
		t.Fatalf("%s --version: %v", binary, err)
	}
	commit, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatal(err)
	}
	want := "gardener-extension-cilium-selfhosted " + version + " (commit " + strings.TrimSpace(string(commit)) + ", tree "
	if !strings.HasPrefix(string(out), want) {
		t.Errorf("--version printed %q, want it to begin with %q", out, want)
	}
}
