// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

// Package cilium holds what this extension knows about Cilium itself: which workloads and containers talk to
// kube-apiserver, how a Cilium version is read from an image, and which behaviour each version has.
package cilium

import (
	"strings"

	"github.com/Masterminds/semver/v3"
)

// Version is a Cilium release, as read from an image tag.
type Version struct {
	v *semver.Version
}

// minAPIServerURLs is the first release that knows `k8s-api-server-urls` (cilium/cilium#37601, v1.18.0):
// pkg/k8s/client/config.go SharedConfig.Flags registers option.K8sAPIServerURLs from then on.
var minAPIServerURLs = semver.MustParse("1.18.0")

// VersionFromImage reads the Cilium version from an image reference such as
// `quay.io/cilium/cilium:v1.19.7@sha256:...`. It reports false for an image without a semantic version tag
// (a digest only, `latest`, a custom build): callers then assume the newest behaviour.
func VersionFromImage(image string) (Version, bool) {
	ref, _, _ := strings.Cut(image, "@")
	slash := strings.LastIndex(ref, "/")
	colon := strings.LastIndex(ref, ":")
	if colon <= slash {
		return Version{}, false
	}
	v, err := semver.NewVersion(ref[colon+1:])
	if err != nil {
		return Version{}, false
	}
	return Version{v: v}, true
}

// String returns the version without a leading v, or "unknown".
func (v Version) String() string {
	if v.v == nil {
		return "unknown"
	}
	return v.v.String()
}

// SupportsAPIServerURLs tells whether the agent, operator and `cilium-dbg build-config` read a list of API server
// URLs (`k8s-api-server-urls`, env CILIUM_K8S_API_SERVER_URLS). An unknown version is taken to be a current one.
// Pre-releases of 1.18 (1.18.0-rc.1) count as 1.18.
func (v Version) SupportsAPIServerURLs() bool {
	if v.v == nil {
		return true
	}
	core, _ := v.v.SetPrerelease("")
	return !core.LessThan(minAPIServerURLs)
}

// IsCiliumImage tells whether an image is one of Cilium's own release images (agent or operator), whose tag is the
// Cilium version. Envoy's image (`cilium-envoy`) is tagged with Envoy's version instead.
func IsCiliumImage(image string) bool {
	ref, _, _ := strings.Cut(image, "@")
	if colon := strings.LastIndex(ref, ":"); colon > strings.LastIndex(ref, "/") {
		ref = ref[:colon]
	}
	name := ref[strings.LastIndex(ref, "/")+1:]
	return name == "cilium" || name == "operator" || strings.HasPrefix(name, "operator-")
}
