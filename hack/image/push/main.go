// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

// Command push publishes what make image built: the image index that the OCI layout holds under VERSION's tag to
// -image-repository, and the extension's chart, packaged as a Helm OCI artifact with that repository, VERSION's tag
// and the index's digest in its values, to -chart-repository under the same tag; it prints both digests and writes
// the registrations of that chart into -out (the operator Extension of its reference and digest, and the
// ControllerDeployment with it inlined). Given -image-digest, it publishes the chart alone, for the index already at
// -image-repository@digest.
//
// It refuses an image whose version label (org.opencontainers.image.version) is not VERSION, and a chart whose digest
// names no such index in the image repository. It logs in as docker and helm do (go-containerregistry's default
// keychain for the image, Helm's registry configuration for the chart). Registries on loopback and RFC 1918
// addresses are spoken to over plain HTTP, as gardenlet pulls from them (Gardener's pkg/utils/oci,
// go-containerregistry's name.Registry.Scheme).
//
//	go run ./hack/image/push -image-repository 127.0.0.1:5000/cilium-selfhosted -chart-repository 127.0.0.1:5000/charts/cilium-selfhosted
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	gcrv1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"go.yaml.in/yaml/v3"
	"helm.sh/helm/v4/pkg/chart/common"
	chartv2 "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	chartutil "helm.sh/helm/v4/pkg/chart/v2/util"
	"helm.sh/helm/v4/pkg/registry"

	"github.com/gardener/gardener-extension-cilium-selfhosted/charts"
	"github.com/gardener/gardener-extension-cilium-selfhosted/hack/image/ocilayout"
)

// LabelVersion is the image label that must say VERSION (the Dockerfile sets it from hack/image/build.sh).
const LabelVersion = "org.opencontainers.image.version"

func main() {
	var o options
	flag.StringVar(&o.layout, "layout", "bin/image/oci", "the OCI layout make image wrote")
	flag.StringVar(&o.chart, "chart", "charts/gardener-extension-cilium-selfhosted", "the chart's directory")
	flag.StringVar(&o.versionFile, "version-file", "VERSION", "the file that holds the version")
	flag.StringVar(&o.imageRepository, "image-repository", "", "where the image index goes, without tag (IMAGE_REPOSITORY)")
	flag.StringVar(&o.chartRepository, "chart-repository", "", "where the chart goes, without tag (CHART_REPOSITORY)")
	flag.StringVar(&o.imageDigest, "image-digest", "", "publish the chart alone, for the index already at image-repository@this digest (IMAGE_DIGEST)")
	flag.StringVar(&o.out, "out", "bin/push", "where the registrations of the published chart are written (PUSH_DIR)")
	flag.Parse()
	if err := o.run(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "push:", err)
		os.Exit(1)
	}
}

type options struct {
	layout, chart, versionFile, out               string
	imageRepository, chartRepository, imageDigest string
}

func (o options) run(ctx context.Context) error {
	switch {
	case o.imageRepository == "":
		return fmt.Errorf("IMAGE_REPOSITORY is not set: where the image index goes, such as registry.example.com/gardener/extensions/cilium-selfhosted")
	case o.chartRepository == "":
		return fmt.Errorf("CHART_REPOSITORY is not set: where the chart goes, such as registry.example.com/gardener/charts/cilium-selfhosted")
	case strings.ContainsAny(o.imageRepository, "@") || strings.Contains(o.imageRepository[strings.LastIndex(o.imageRepository, "/")+1:], ":"):
		return fmt.Errorf("IMAGE_REPOSITORY %q: a repository without tag or digest (the tag is VERSION's)", o.imageRepository)
	}
	b, err := os.ReadFile(o.versionFile)
	if err != nil {
		return err
	}
	version := strings.TrimSpace(string(b))
	digest, err := o.publishImage(ctx, version)
	if err != nil {
		return err
	}
	fmt.Printf("image %s:%s@%s\n", o.imageRepository, version, digest)
	archive, chartDigest, err := o.publishChart(version, digest)
	if err != nil {
		return err
	}
	ref := o.chartRepository + ":" + version + "@" + chartDigest
	fmt.Printf("chart %s\n", ref)
	return o.writeRegistrations(ref, archive)
}

// writeRegistrations writes what an operator installs the published chart with: the operator Extension of its OCI
// reference, and the ControllerDeployment with the chart inlined beside the ControllerRegistration, which gardenadm
// init installs without pulling a chart (docs/usage/install.md).
func (o options) writeRegistrations(ref string, archive []byte) error {
	header := "# Written by make push for the chart it published at " + ref + ".\n"
	extension, err := charts.Extension(ref, header)
	if err != nil {
		return err
	}
	registration, err := charts.RawChartRegistration(archive, header)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	for file, data := range map[string][]byte{"extension.yaml": extension, "controller-registration.yaml": registration} {
		if err := os.WriteFile(filepath.Join(o.out, file), data, 0o644); err != nil {
			return err
		}
	}
	fmt.Printf("registrations %s and %s\n", filepath.Join(o.out, "extension.yaml"), filepath.Join(o.out, "controller-registration.yaml"))
	return nil
}

// publishImage pushes the layout's index of version, or checks the one at imageDigest, and returns its digest.
func (o options) publishImage(ctx context.Context, version string) (string, error) {
	repo, err := name.NewRepository(o.imageRepository, name.StrictValidation)
	if err != nil {
		return "", fmt.Errorf("IMAGE_REPOSITORY %q: %w", o.imageRepository, err)
	}
	if o.imageDigest != "" {
		ref := repo.Digest(o.imageDigest)
		index, err := remote.Index(ref, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain))
		if err != nil {
			return "", fmt.Errorf("IMAGE_DIGEST %s: no image index %s: %w", o.imageDigest, ref, err)
		}
		if err := checkVersion(index, version); err != nil {
			return "", fmt.Errorf("IMAGE_DIGEST %s: %w", o.imageDigest, err)
		}
		return o.imageDigest, nil
	}
	index, err := ocilayout.TaggedIndex(o.layout, version)
	if err != nil {
		return "", err
	}
	if err := checkVersion(index, version); err != nil {
		return "", fmt.Errorf("%s: %w; build it again with make image", o.layout, err)
	}
	if err := remote.WriteIndex(repo.Tag(version), index, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
		return "", fmt.Errorf("pushing the image index to %s:%s: %w", repo, version, err)
	}
	digest, err := index.Digest()
	if err != nil {
		return "", err
	}
	// What the chart will name must be what the registry serves.
	desc, err := remote.Head(repo.Digest(digest.String()), remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain))
	if err != nil || desc.Digest != digest {
		return "", fmt.Errorf("%s@%s is not in the registry after the push: %v", repo, digest, err)
	}
	return digest.String(), nil
}

// checkVersion says whether every image of index carries version in its version label.
func checkVersion(index gcrv1.ImageIndex, version string) error {
	manifest, err := index.IndexManifest()
	if err != nil {
		return err
	}
	if len(manifest.Manifests) == 0 {
		return fmt.Errorf("the image index holds no image")
	}
	for _, d := range manifest.Manifests {
		image, err := index.Image(d.Digest)
		if err != nil {
			return err
		}
		config, err := image.ConfigFile()
		if err != nil {
			return err
		}
		if got := config.Config.Labels[LabelVersion]; got != version {
			platform := "unknown platform"
			if d.Platform != nil {
				platform = d.Platform.String()
			}
			return fmt.Errorf("the image for %s says version %q (label %s), VERSION says %s", platform, got, LabelVersion, version)
		}
	}
	return nil
}

// publishChart packages the chart with the image's repository, tag and digest in its values, pushes it and returns
// the packed chart and its manifest's digest.
func (o options) publishChart(version, digest string) ([]byte, string, error) {
	chart, err := loader.LoadDir(o.chart)
	if err != nil {
		return nil, "", err
	}
	if err := setImage(chart, o.imageRepository, version, digest); err != nil {
		return nil, "", err
	}
	// As the image: every timestamp is the commit's, so that the same commit and image give the same chart digest.
	out, err := exec.Command("git", "log", "-1", "--format=%cI").Output()
	if err != nil {
		return nil, "", fmt.Errorf("the commit's time: %w", err)
	}
	committed, err := time.Parse(time.RFC3339, strings.TrimSpace(string(out)))
	if err != nil {
		return nil, "", err
	}
	chart.ModTime, chart.SchemaModTime = committed, committed
	for _, files := range [][]*common.File{chart.Raw, chart.Templates, chart.Files} {
		for _, f := range files {
			f.ModTime = committed
		}
	}
	dir, err := os.MkdirTemp("", "push-chart-")
	if err != nil {
		return nil, "", err
	}
	defer os.RemoveAll(dir)
	archive, err := chartutil.Save(chart, dir)
	if err != nil {
		return nil, "", err
	}
	data, err := os.ReadFile(archive)
	if err != nil {
		return nil, "", err
	}
	ref := o.chartRepository + ":" + version
	// Helm's own login (helm registry login), as helm push uses it.
	clientOptions := []registry.ClientOption{registry.ClientOptWriter(io.Discard)}
	if plainHTTP(o.chartRepository) {
		clientOptions = append(clientOptions, registry.ClientOptPlainHTTP())
	}
	client, err := registry.NewClient(clientOptions...)
	if err != nil {
		return nil, "", err
	}
	// Not strict: the repository's last element need not be the chart's name, and the tag is VERSION, as the image's.
	result, err := client.Push(data, ref, registry.PushOptStrictMode(false), registry.PushOptCreationTime(committed.UTC().Format(time.RFC3339)))
	if err != nil {
		return nil, "", fmt.Errorf("pushing the chart to %s: %w", ref, err)
	}
	return data, result.Manifest.Digest, nil
}

// setImage writes the image's repository, tag and digest into the chart's values.yaml, keeping its comments.
func setImage(chart *chartv2.Chart, repository, tag, digest string) error {
	for _, f := range chart.Raw {
		if f.Name != chartutil.ValuesfileName {
			continue
		}
		var doc yaml.Node
		if err := yaml.Unmarshal(f.Data, &doc); err != nil {
			return err
		}
		image := mappingValue(doc.Content[0], "image")
		if image == nil {
			return fmt.Errorf("the chart's values.yaml has no image")
		}
		for key, value := range map[string]string{"repository": repository, "tag": tag, "digest": digest} {
			node := mappingValue(image, key)
			if node == nil {
				return fmt.Errorf("the chart's values.yaml has no image.%s", key)
			}
			node.Kind, node.Tag, node.Value, node.Style = yaml.ScalarNode, "!!str", value, 0
		}
		data, err := yaml.Marshal(&doc)
		if err != nil {
			return err
		}
		f.Data = data
		return yaml.Unmarshal(data, &chart.Values)
	}
	return fmt.Errorf("the chart has no %s", chartutil.ValuesfileName)
}

// mappingValue is the value of key in the mapping node m, nil when it has none.
func mappingValue(m *yaml.Node, key string) *yaml.Node {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

// plainHTTP says whether the repository's registry is spoken to over plain HTTP: on a loopback or RFC 1918 address,
// as go-containerregistry (and so gardenlet) does.
func plainHTTP(repository string) bool {
	host := strings.SplitN(repository, "/", 2)[0]
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && (ip.IsLoopback() || ip.IsPrivate())
}
