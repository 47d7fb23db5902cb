// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

// Package ocilayout reads the image index that make image writes into an OCI layout by the tag it gives it: one
// reading for make push, make image's report and the suites.
package ocilayout

import (
	"fmt"

	gcrv1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// RefName is the annotation by which an OCI layout's index.json names what it holds (image-spec annotations.md),
// which hack/image/build.sh sets to VERSION.
const RefName = "org.opencontainers.image.ref.name"

// TaggedIndex is the image index tagged tag in the OCI layout at path.
func TaggedIndex(path, tag string) (gcrv1.ImageIndex, error) {
	top, err := layout.ImageIndexFromPath(path)
	if err != nil {
		return nil, fmt.Errorf("the OCI layout %s (make image writes it): %w", path, err)
	}
	manifest, err := top.IndexManifest()
	if err != nil {
		return nil, err
	}
	for _, d := range manifest.Manifests {
		if d.Annotations[RefName] == tag {
			return top.ImageIndex(d.Digest)
		}
	}
	return nil, fmt.Errorf("the OCI layout %s holds no image index tagged %s: run make image", path, tag)
}
