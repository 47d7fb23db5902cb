// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package publish

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	gcrv1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	ocilayout "github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/yaml"

	gardencorev1 "github.com/gardener/gardener/pkg/apis/core/v1"
	gardencorev1beta1 "github.com/gardener/gardener/pkg/apis/core/v1beta1"
	operatorv1alpha1 "github.com/gardener/gardener/pkg/apis/operator/v1alpha1"
	"github.com/gardener/gardener/pkg/gardenlet/controller/controllerinstallation/controllerinstallation"
	gardenerutils "github.com/gardener/gardener/pkg/utils/gardener"
	"github.com/gardener/gardener/pkg/utils/gardener/operator"
	"github.com/gardener/gardener/pkg/utils/oci"

	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/fixtures"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/helm"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/image"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/registry"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/repo"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/testenv"
)

// published is what make push printed (each reference as repository:tag@digest), and the folder it wrote the
// registrations into.
type published struct {
	imageRepository, imageDigest string
	chartRepository, chartDigest string
	registrations                string
}

var printedRef = regexp.MustCompile(`(?m)^(image|chart) (\S+):(\S+)@(sha256:[0-9a-f]{64})$`)

// push runs make push as an operator does, into repositories of the registry named after the test, with vars added.
func push(t *testing.T, vars ...string) (published, string, error) {
	t.Helper()
	top, err := repo.Root()
	if err != nil {
		t.Fatal(err)
	}
	base := reg.Host + "/" + strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	p := published{imageRepository: base + "/cilium-selfhosted", chartRepository: base + "/charts/cilium-selfhosted", registrations: t.TempDir()}
	args := append([]string{"-s", "push", "IMAGE_LAYOUT=" + layout.Path, "IMAGE_REPOSITORY=" + p.imageRepository, "CHART_REPOSITORY=" + p.chartRepository,
		"PUSH_DIR=" + p.registrations}, vars...)
	cmd := exec.Command("make", args...)
	cmd.Dir = top
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return p, out.String(), fmt.Errorf("make %s: %w", strings.Join(args, " "), err)
	}
	for _, m := range printedRef.FindAllStringSubmatch(out.String(), -1) {
		if m[3] != layout.Tag {
			t.Errorf("make push printed the tag %s, want VERSION's %s: %s", m[3], layout.Tag, m[0])
		}
		switch {
		case m[1] == "image" && m[2] == p.imageRepository:
			p.imageDigest = m[4]
		case m[1] == "chart" && m[2] == p.chartRepository:
			p.chartDigest = m[4]
		}
	}
	if p.imageDigest == "" || p.chartDigest == "" {
		t.Fatalf("make push printed no digest of the image in %s and the chart in %s:\n%s", p.imageRepository, p.chartRepository, out.String())
	}
	return p, out.String(), nil
}

// TestPushedImageIsTheBuiltOne: make push publishes the index make image built, under VERSION's tag, and says its
// digest; pulled by that digest, the image runs and says VERSION and the commit.
func TestPushedImageIsTheBuiltOne(t *testing.T) {
	p, _, err := push(t)
	if err != nil {
		t.Fatal(err)
	}
	if p.imageDigest != layout.Index {
		t.Errorf("make push says the image's digest is %s, make image built %s", p.imageDigest, layout.Index)
	}
	desc, err := remote.Head(must(name.NewTag(p.imageRepository + ":" + layout.Tag)))
	if err != nil || desc.Digest.String() != layout.Index {
		t.Errorf("the registry serves %s:%s as %v (%v), want %s", p.imageRepository, layout.Tag, desc, err, layout.Index)
	}
	ctx := context.Background()
	ref := p.imageRepository + "@" + p.imageDigest
	if err := podman.Pull(ctx, ref); err != nil {
		t.Fatal(err)
	}
	out, err := podman.Run(ctx, ref, "--version")
	if err != nil {
		t.Fatal(err)
	}
	commit, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatal(err)
	}
	if want := "gardener-extension-cilium-selfhosted " + layout.Tag + " (commit " + strings.TrimSpace(string(commit)); !strings.Contains(out, want) {
		t.Errorf("the pulled image's --version says %q, want %q", out, want)
	}
}

// TestChartPulledAsGardenletPullsIt: the Extension make push wrote for the chart it published, turned into a
// ControllerDeployment as gardener-operator and gardenadm do, pulls the chart by digest through Gardener's HelmRegistry
// (pkg/utils/oci, what gardenlet's ControllerInstallation reconciler pulls an ociRepository with); rendered as that
// reconciler renders it for a self-hosted shoot (its values, Gardener's chart renderer,
// MutateSpecForSelfHostedShootExtensions on the first control-plane node), it names the published image by
// repository, tag and digest, and the container it describes runs from the registry. The ControllerDeployment with
// the chart inlined that make push wrote beside it renders the same DaemonSet.
func TestChartPulledAsGardenletPullsIt(t *testing.T) {
	p, _, err := push(t)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	_, deployment := operator.ControllerRegistrationForExtension(decode[*operatorv1alpha1.Extension](t, filepath.Join(p.registrations, "extension.yaml")))
	if want := p.chartRepository + ":" + layout.Tag + "@" + p.chartDigest; deployment.Helm.OCIRepository.GetURL() != want {
		t.Errorf("the Extension pulls %s, want the published %s", deployment.Helm.OCIRepository.GetURL(), want)
	}
	archive, err := oci.NewHelmRegistry(fake.NewClientBuilder().Build()).Pull(ctx, deployment.Helm.OCIRepository)
	if err != nil {
		t.Fatal(err)
	}
	daemonSet := renderAsGardenlet(t, archive)
	container := daemonSet.Spec.Template.Spec.Containers[0]
	if want := p.imageRepository + ":" + layout.Tag + "@" + p.imageDigest; container.Image != want {
		t.Fatalf("the pulled chart's DaemonSet runs %s, want the published %s", container.Image, want)
	}
	if !daemonSet.Spec.Template.Spec.HostNetwork {
		t.Errorf("the DaemonSet as gardenlet renders it for the first control-plane node is not in the host network")
	}
	if err := podman.Pull(ctx, container.Image); err != nil {
		t.Fatal(err)
	}
	if _, err := podman.Run(ctx, container.Image, "--version"); err != nil {
		t.Errorf("the image the chart names does not run: %v", err)
	}
	inlined := rawChartDeployment(t, filepath.Join(p.registrations, "controller-registration.yaml"))
	if image := renderAsGardenlet(t, inlined.Helm.RawChart).Spec.Template.Spec.Containers[0].Image; image != container.Image {
		t.Errorf("the ControllerDeployment with the chart inlined runs %s, the pulled chart %s", image, container.Image)
	}
}

// TestMirroredWithItsDigest: copied with skopeo to a mirror, keeping its digest (docs/usage/install.md, "A mirror"),
// the image is pulled by the reference the chart names from the mirror while the original registry does not answer,
// as containerd does with a mirror in the original host's hosts.toml (here podman's registries.conf), and runs.
func TestMirroredWithItsDigest(t *testing.T) {
	p, _, err := push(t)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	mirror, err := registry.Start(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer mirror.Stop(ctx)
	// The original registry, as the first node sees it: nothing answers at its address.
	original, err := registry.FreeAddress()
	if err != nil {
		t.Fatal(err)
	}
	path := strings.SplitN(p.imageRepository, "/", 2)[1]
	copyCmd := exec.CommandContext(ctx, "skopeo", "copy", "--quiet", "--all", "--preserve-digests", "--src-tls-verify=false", "--dest-tls-verify=false",
		"docker://"+p.imageRepository+"@"+p.imageDigest, "docker://"+mirror.Host+"/"+path+":"+layout.Tag)
	if out, err := copyCmd.CombinedOutput(); err != nil {
		t.Fatalf("skopeo copy: %v\n%s", err, out)
	}
	conf := filepath.Join(t.TempDir(), "registries.conf")
	if err := os.WriteFile(conf, fmt.Appendf(nil, "[[registry]]\nlocation = %q\ninsecure = true\n[[registry.mirror]]\nlocation = %q\ninsecure = true\n", original, mirror.Host), 0o644); err != nil {
		t.Fatal(err)
	}
	// A node of its own, which has pulled nothing yet.
	node, err := image.NewRuntime(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = node.Reset() }()
	node.Env = []string{"CONTAINERS_REGISTRIES_CONF=" + conf}
	ref := original + "/" + path + ":" + layout.Tag + "@" + p.imageDigest
	if err := node.Pull(ctx, ref); err != nil {
		t.Fatal(err)
	}
	if _, err := node.Run(ctx, ref, "--version"); err != nil {
		t.Errorf("the image pulled from the mirror does not run: %v", err)
	}
}

// TestImportArchiveKeepsTheDigest: the archive docs/usage/install.md ("An import") has an operator copy with skopeo
// for containerd's import holds the pushed index under its digest, with its images, which is what kubelet then finds
// the chart's image by. (The import itself, `ctr images import`, needs containerd, which does not run here.)
func TestImportArchiveKeepsTheDigest(t *testing.T) {
	p, _, err := push(t)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	archive := filepath.Join(t.TempDir(), "cilium-selfhosted.tar")
	copyCmd := exec.CommandContext(ctx, "skopeo", "copy", "--quiet", "--all", "--src-tls-verify=false",
		"docker://"+p.imageRepository+"@"+p.imageDigest, "oci-archive:"+archive)
	if out, err := copyCmd.CombinedOutput(); err != nil {
		t.Fatalf("skopeo copy: %v\n%s", err, out)
	}
	raw, err := exec.CommandContext(ctx, "skopeo", "inspect", "--raw", "oci-archive:"+archive).Output()
	if err != nil {
		t.Fatalf("skopeo inspect: %v", err)
	}
	if digest := fmt.Sprintf("sha256:%x", sha256.Sum256(raw)); digest != p.imageDigest {
		t.Errorf("the archive holds %s, want the pushed index %s", digest, p.imageDigest)
	}
	var index struct{ Manifests []json.RawMessage }
	if err := json.Unmarshal(raw, &index); err != nil || len(index.Manifests) == 0 {
		t.Errorf("the archive's top manifest is no index of the pushed images: %v\n%s", err, raw)
	}
}

// renderAsGardenlet renders the packed chart as gardenlet's ControllerInstallation reconciler does for the first
// control-plane node of a self-hosted shoot, and returns its DaemonSet.
func renderAsGardenlet(t *testing.T, archive []byte) *appsv1.DaemonSet {
	t.Helper()
	values, err := testenv.ChartValues(fixtures.Shoot(true))
	if err != nil {
		t.Fatal(err)
	}
	// The operator's ControllerDeployment sets no image: the published chart names it.
	delete(values, "image")
	release, err := helm.GardenerRenderer().RenderArchive(archive, testenv.RegistrationName, testenv.ExtensionNamespace, values)
	if err != nil {
		t.Fatal(err)
	}
	secretData := release.AsSecretData()
	r := &controllerinstallation.Reconciler{
		SelfHostedShootMeta:       &k8stypes.NamespacedName{Namespace: "kube-system", Name: fixtures.Shoot(true).Name},
		BootstrapControlPlaneNode: true,
	}
	if err := gardenerutils.MutateObjectsInSecretData(secretData, testenv.ExtensionNamespace, []string{appsv1.GroupName}, r.MutateSpecForSelfHostedShootExtensions); err != nil {
		t.Fatal(err)
	}
	return daemonSetOf(t, secretData)
}

// decode decodes the one object of file strictly.
func decode[T runtime.Object](t *testing.T, file string) T {
	t.Helper()
	objs := decodeAll(t, file)
	for _, obj := range objs {
		if o, ok := obj.(T); ok {
			return o
		}
	}
	var zero T
	t.Fatalf("%s holds no %T", file, zero)
	return zero
}

// rawChartDeployment is the ControllerDeployment of file, which also holds its ControllerRegistration.
func rawChartDeployment(t *testing.T, file string) *gardencorev1.ControllerDeployment {
	t.Helper()
	if decode[*gardencorev1beta1.ControllerRegistration](t, file) == nil {
		t.Fatalf("%s holds no ControllerRegistration", file)
	}
	return decode[*gardencorev1.ControllerDeployment](t, file)
}

// decodeAll decodes the YAML documents of file strictly, with Gardener's core and operator types.
func decodeAll(t *testing.T, file string) []runtime.Object {
	t.Helper()
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{gardencorev1.AddToScheme, gardencorev1beta1.AddToScheme, operatorv1alpha1.AddToScheme} {
		if err := add(s); err != nil {
			t.Fatal(err)
		}
	}
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	decoder := serializer.NewCodecFactory(s, serializer.EnableStrict).UniversalDeserializer()
	var objs []runtime.Object
	for doc := range strings.SplitSeq(string(data), "\n---\n") {
		obj, _, err := decoder.Decode([]byte(doc), nil, nil)
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		objs = append(objs, obj)
	}
	return objs
}

// daemonSetOf is the one DaemonSet of the rendered chart's secret data.
func daemonSetOf(t *testing.T, secretData map[string][]byte) *appsv1.DaemonSet {
	t.Helper()
	var found []*appsv1.DaemonSet
	for _, data := range secretData {
		for doc := range strings.SplitSeq(string(data), "\n---\n") {
			var meta struct{ Kind string }
			if yaml.Unmarshal([]byte(doc), &meta) != nil || meta.Kind != "DaemonSet" {
				continue
			}
			ds := &appsv1.DaemonSet{}
			if err := yaml.Unmarshal([]byte(doc), ds); err != nil {
				t.Fatal(err)
			}
			found = append(found, ds)
		}
	}
	if len(found) != 1 {
		t.Fatalf("the rendered chart holds %d DaemonSets, want 1", len(found))
	}
	return found[0]
}

// TestPushRefuses: make push refuses, with the reason and before pushing anything, a chart for an image digest the
// image repository does not hold, and an image whose version label is not VERSION.
func TestPushRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		vars []string
		want string
	}{
		{"a digest of no image", []string{"IMAGE_DIGEST=sha256:" + strings.Repeat("0", 64)}, "IMAGE_DIGEST sha256:000"},
		{"no image repository", []string{"IMAGE_REPOSITORY="}, "IMAGE_REPOSITORY is not set"},
		// An index of another version tagged with VERSION, as a retag or a stale layout leaves it.
		{"an image of another version", []string{"IMAGE_LAYOUT=" + relabeled(t, "v0.0.1")}, `says version "v0.0.1" (label org.opencontainers.image.version), VERSION says ` + layout.Tag},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, out, err := push(t, tc.vars...)
			if err == nil {
				t.Fatalf("make push succeeded:\n%s", out)
			}
			if !strings.Contains(out, tc.want) {
				t.Errorf("make push said %q, want the reason %q", out, tc.want)
			}
			for _, repository := range []string{p.imageRepository, p.chartRepository} {
				if _, err := remote.Head(must(name.NewTag(repository + ":" + layout.Tag))); err == nil {
					t.Errorf("make push refused, but published %s:%s", repository, layout.Tag)
				}
			}
		})
	}
}

// relabeled writes an OCI layout whose index, tagged with VERSION, holds the suite's images with version in their
// version label, and returns its path.
func relabeled(t *testing.T, version string) string {
	t.Helper()
	top, err := layout.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	manifest := must(top.IndexManifest())
	index := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, d := range manifest.Manifests {
		image := must(top.Image(d.Digest))
		config := must(image.ConfigFile()).DeepCopy()
		config.Config.Labels["org.opencontainers.image.version"] = version
		index = mutate.AppendManifests(index, mutate.IndexAddendum{Add: must(mutate.ConfigFile(image, config)), Descriptor: gcrv1.Descriptor{Platform: d.Platform}})
	}
	dir := t.TempDir()
	path := must(ocilayout.Write(dir, mutate.IndexMediaType(empty.Index, types.OCIImageIndex)))
	if err := path.AppendIndex(index, ocilayout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": layout.Tag})); err != nil {
		t.Fatal(err)
	}
	return dir
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
