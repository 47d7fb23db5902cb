// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

// Command info prints the digest of the image index make image wrote into an OCI layout and the size of each of its
// images (manifest, config and compressed layers: what a node pulls).
//
//	go run ./hack/image/info bin/image/oci v0.1.0
package main

import (
	"fmt"
	"io"
	"os"

	"github.com/gardener/gardener-extension-cilium-selfhosted/hack/image/ocilayout"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: info LAYOUT TAG")
		os.Exit(2)
	}
	if err := run(os.Stdout, os.Args[1], os.Args[2]); err != nil {
		fmt.Fprintln(os.Stderr, "info:", err)
		os.Exit(1)
	}
}

func run(w io.Writer, layout, tag string) error {
	index, err := ocilayout.TaggedIndex(layout, tag)
	if err != nil {
		return err
	}
	digest, err := index.Digest()
	if err != nil {
		return err
	}
	manifest, err := index.IndexManifest()
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "index %s\n", digest)
	for _, m := range manifest.Manifests {
		img, err := index.Image(m.Digest)
		if err != nil {
			return err
		}
		im, err := img.Manifest()
		if err != nil {
			return err
		}
		size := m.Size + im.Config.Size
		for _, l := range im.Layers {
			size += l.Size
		}
		platform := "unknown"
		if m.Platform != nil {
			platform = m.Platform.OS + "/" + m.Platform.Architecture
		}
		fmt.Fprintf(w, "%s %s %.1f MiB\n", platform, m.Digest, float64(size)/(1<<20))
	}
	return nil
}
