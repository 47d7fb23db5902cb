// Command info prints the digest of an image index in an OCI layout and the size of each of its images (manifest,
// config and compressed layers: what a node pulls), read by the OCI image layout specification's files alone.
//
//	go run ./hack/image/info bin/image/oci v0.1.0
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// descriptor is an OCI content descriptor (image-spec descriptor.md).
type descriptor struct {
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Platform    *struct {
		OS           string `json:"os"`
		Architecture string `json:"architecture"`
	} `json:"platform,omitempty"`
}

// index is an OCI image index or image manifest: whichever fields the media type has.
type index struct {
	Manifests []descriptor `json:"manifests"`
	Config    descriptor   `json:"config"`
	Layers    []descriptor `json:"layers"`
}

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
	var top index
	if err := readJSON(filepath.Join(layout, "index.json"), &top); err != nil {
		return err
	}
	var tagged *descriptor
	for i, d := range top.Manifests {
		if d.Annotations["org.opencontainers.image.ref.name"] == tag {
			tagged = &top.Manifests[i]
		}
	}
	if tagged == nil {
		return fmt.Errorf("no image tagged %s in %s", tag, layout)
	}
	fmt.Fprintf(w, "index %s\n", tagged.Digest)
	var images index
	if err := readJSON(blob(layout, tagged.Digest), &images); err != nil {
		return err
	}
	for _, m := range images.Manifests {
		var image index
		if err := readJSON(blob(layout, m.Digest), &image); err != nil {
			return err
		}
		size := m.Size + image.Config.Size
		for _, l := range image.Layers {
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

func blob(layout, digest string) string {
	algorithm, hex, _ := strings.Cut(digest, ":")
	return filepath.Join(layout, "blobs", algorithm, hex)
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}
