package publish

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
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
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/yaml"

	gardencorev1 "github.com/gardener/gardener/pkg/apis/core/v1"
	"github.com/gardener/gardener/pkg/gardenlet/controller/controllerinstallation/controllerinstallation"
	gardenerutils "github.com/gardener/gardener/pkg/utils/gardener"
	"github.com/gardener/gardener/pkg/utils/oci"

	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/fixtures"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/helm"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/repo"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/testenv"
)

// published is what make push printed: each reference as repository:tag@digest.
type published struct {
	imageRepository, imageDigest string
	chartRepository, chartDigest string
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
	p := published{imageRepository: base + "/cilium-selfhosted", chartRepository: base + "/charts/cilium-selfhosted"}
	args := append([]string{"-s", "push", "IMAGE_LAYOUT=" + layout.Path, "IMAGE_REPOSITORY=" + p.imageRepository, "CHART_REPOSITORY=" + p.chartRepository}, vars...)
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
	if _, err := podman.Output(ctx, append(pullArgs, ref)...); err != nil {
		t.Fatal(err)
	}
	out, err := podman.Output(ctx, append(append([]string{"run"}, imageRunArgs...), ref, "--version")...)
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

// pullArgs pull over plain HTTP, as a node's containerd does from a registry its hosts.toml names with an http:// server.
var pullArgs = []string{"pull", "--quiet", "--tls-verify=false"}

// imageRunArgs run a container with no network, as nothing of it may reach another address.
var imageRunArgs = []string{"--rm", "--network", "none", "--ulimit", "nproc=4096:4096", "--ulimit", "nofile=4096:4096"}

// TestChartPulledAsGardenletPullsIt: the chart make push published, pulled by digest through Gardener's HelmRegistry
// (pkg/utils/oci, what gardenlet's ControllerInstallation reconciler pulls an ociRepository with) and rendered as that
// reconciler renders it for a self-hosted shoot (its values, Gardener's chart renderer, MutateSpecForSelfHostedShootExtensions
// on the first control-plane node), names the published image by repository, tag and digest; the container it
// describes runs from the registry.
func TestChartPulledAsGardenletPullsIt(t *testing.T) {
	p, _, err := push(t)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	archive, err := oci.NewHelmRegistry(fake.NewClientBuilder().Build()).Pull(ctx, &gardencorev1.OCIRepository{
		Repository: ptr.To(p.chartRepository), Tag: ptr.To(layout.Tag), Digest: ptr.To(p.chartDigest),
	})
	if err != nil {
		t.Fatal(err)
	}
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
	daemonSet := daemonSetOf(t, secretData)
	container := daemonSet.Spec.Template.Spec.Containers[0]
	if want := p.imageRepository + ":" + layout.Tag + "@" + p.imageDigest; container.Image != want {
		t.Fatalf("the pulled chart's DaemonSet runs %s, want the published %s", container.Image, want)
	}
	if !daemonSet.Spec.Template.Spec.HostNetwork {
		t.Errorf("the DaemonSet as gardenlet renders it for the first control-plane node is not in the host network")
	}
	if _, err := podman.Output(ctx, append(pullArgs, container.Image)...); err != nil {
		t.Fatal(err)
	}
	if _, err := podman.Output(ctx, append(append([]string{"run"}, imageRunArgs...), container.Image, "--version")...); err != nil {
		t.Errorf("the image the chart names does not run: %v", err)
	}
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
