// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"strings"
	"testing"

	"helm.sh/helm/v4/pkg/chart/v2/loader"
)

// TestSetImageKeepsTheValuesFile: the published chart's values.yaml is the one in git with the image's repository,
// tag and digest written in; its comments, which document the values for the operator, stay.
func TestSetImageKeepsTheValuesFile(t *testing.T) {
	chart, err := loader.LoadDir("../../../charts/gardener-extension-cilium-selfhosted")
	if err != nil {
		t.Fatal(err)
	}
	if err := setImage(chart, "registry.example.com/cilium-selfhosted", "v1.2.3", "sha256:abc"); err != nil {
		t.Fatal(err)
	}
	image := chart.Values["image"].(map[string]any)
	if image["repository"] != "registry.example.com/cilium-selfhosted" || image["tag"] != "v1.2.3" || image["digest"] != "sha256:abc" {
		t.Errorf("values image %v, want the repository, tag and digest set", image)
	}
	for _, f := range chart.Raw {
		if f.Name == "values.yaml" {
			if !strings.Contains(string(f.Data), "# Where the image was pushed.") || !strings.Contains(string(f.Data), "repository: registry.example.com/cilium-selfhosted") {
				t.Errorf("values.yaml lost its comments or the repository:\n%s", f.Data)
			}
		}
	}
}

func TestPlainHTTP(t *testing.T) {
	for repository, want := range map[string]bool{
		"127.0.0.1:5000/a/b":             true,
		"localhost:5000/a":               true,
		"10.1.2.3/a":                     true,
		"192.168.0.10:5000/a":            true,
		"registry.example.com/a":         false,
		"europe-docker.pkg.dev/gardener": false,
		"203.0.113.7:443/a":              false,
	} {
		if got := plainHTTP(repository); got != want {
			t.Errorf("plainHTTP(%s) = %t, want %t", repository, got, want)
		}
	}
}
