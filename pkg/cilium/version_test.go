// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package cilium

import "testing"

func TestVersionFromImage(t *testing.T) {
	for _, tc := range []struct {
		image   string
		ok      bool
		version string
		urls    bool
	}{
		{"quay.io/cilium/cilium:v1.17.8", true, "1.17.8", false},
		{"quay.io/cilium/cilium:v1.18.0-rc.1", true, "1.18.0-rc.1", true},
		{"quay.io/cilium/cilium:v1.18.8@sha256:0123456789abcdef", true, "1.18.8", true},
		{"registry:5000/cilium/operator-generic:v1.20.2", true, "1.20.2", true},
		{"quay.io/cilium/cilium@sha256:0123456789abcdef", false, "unknown", true},
		{"registry:5000/cilium/cilium", false, "unknown", true},
		{"quay.io/cilium/cilium:latest", false, "unknown", true},
	} {
		v, ok := VersionFromImage(tc.image)
		if ok != tc.ok || v.String() != tc.version || v.SupportsAPIServerURLs() != tc.urls {
			t.Errorf("%s: got (%s, %v, urls=%v), want (%s, %v, urls=%v)", tc.image, v, ok, v.SupportsAPIServerURLs(), tc.version, tc.ok, tc.urls)
		}
	}
}

func TestIsCiliumImage(t *testing.T) {
	for image, want := range map[string]bool{
		"quay.io/cilium/cilium:v1.19.7":                           true,
		"quay.io/cilium/cilium:v1.19.7@sha256:abc":                true,
		"quay.io/cilium/operator-generic:v1.19.7":                 true,
		"quay.io/cilium/operator:v1.19.7":                         true,
		"registry:5000/cilium:v1.19.7":                            true,
		"quay.io/cilium/cilium-envoy:v1.34.4-1754895458-68cffdfa": false,
		"quay.io/cilium/hubble-relay:v1.19.7":                     false,
	} {
		if got := IsCiliumImage(image); got != want {
			t.Errorf("IsCiliumImage(%s) = %v, want %v", image, got, want)
		}
	}
}
