// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	gcrv1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// TestPrintsTheTaggedIndexAndItsImages: info reads an OCI layout as go-containerregistry writes one (the layout
// specification's index.json and blobs) and prints the digest of the index tagged so and, per platform, each image's
// digest and what a node pulls of it: manifest, config and compressed layers.
func TestPrintsTheTaggedIndexAndItsImages(t *testing.T) {
	index := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	var want []string
	for _, arch := range []string{"amd64", "arm64"} {
		image, err := random.Image(1<<20, 2)
		if err != nil {
			t.Fatal(err)
		}
		image = mutate.MediaType(image, types.OCIManifestSchema1)
		index = mutate.AppendManifests(index, mutate.IndexAddendum{Add: image, Descriptor: gcrv1.Descriptor{Platform: &gcrv1.Platform{OS: "linux", Architecture: arch}}})
		digest, err := image.Digest()
		if err != nil {
			t.Fatal(err)
		}
		manifest, err := image.RawManifest()
		if err != nil {
			t.Fatal(err)
		}
		config, err := image.RawConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		size := int64(len(manifest) + len(config))
		layers, err := image.Layers()
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range layers {
			s, err := l.Size()
			if err != nil {
				t.Fatal(err)
			}
			size += s
		}
		want = append(want, fmt.Sprintf("linux/%s %s %.1f MiB", arch, digest, float64(size)/(1<<20)))
	}
	dir := t.TempDir()
	path, err := layout.Write(dir, mutate.IndexMediaType(empty.Index, types.OCIImageIndex))
	if err != nil {
		t.Fatal(err)
	}
	if err := path.AppendIndex(index, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": "v1.2.3"})); err != nil {
		t.Fatal(err)
	}
	digest, err := index.Digest()
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := run(&out, dir, "v1.2.3"); err != nil {
		t.Fatal(err)
	}
	if got, want := out.String(), "index "+digest.String()+"\n"+strings.Join(want, "\n")+"\n"; got != want {
		t.Errorf("info printed\n%s\nwant\n%s", got, want)
	}
	if err := run(&out, dir, "v9.9.9"); err == nil || !strings.Contains(err.Error(), "no image index tagged v9.9.9") {
		t.Errorf("for a tag the layout does not hold: %v, want an error naming it", err)
	}
}
