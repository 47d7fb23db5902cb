// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

// Package helm renders Helm charts with the Helm Go SDK into typed objects, for tests: Cilium's chart from the module
// cache and this extension's own chart.
package helm

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"helm.sh/helm/v4/pkg/chart/common"
	commonutil "helm.sh/helm/v4/pkg/chart/common/util"
	"helm.sh/helm/v4/pkg/chart/loader/archive"
	chartv2 "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/engine"
	releaseutil "helm.sh/helm/v4/pkg/release/v1/util"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/version"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gardener/gardener/pkg/chartrenderer"

	"github.com/gardener/gardener-extension-cilium-selfhosted/charts"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/fixtures"
)

// kubeVersion is what the charts are rendered for: the envtest kube-apiserver's version.
var kubeVersion = func() common.KubeVersion {
	major, rest, _ := strings.Cut(fixtures.KubernetesVersion, ".")
	minor, _, _ := strings.Cut(rest, ".")
	return common.KubeVersion{Version: "v" + fixtures.KubernetesVersion, Major: major, Minor: minor}
}()

// GardenerRenderer is Gardener's chart renderer (pkg/chartrenderer, the one gardenlet and extensions render their
// charts with) for kubeVersion.
func GardenerRenderer() chartrenderer.Interface {
	return chartrenderer.NewWithServerVersion(&version.Info{GitVersion: kubeVersion.Version, Major: kubeVersion.Major, Minor: kubeVersion.Minor})
}

// LoadDir loads a chart from a directory.
func LoadDir(dir string) (*chartv2.Chart, error) {
	return loader.Load(dir)
}

// LoadFS loads a chart from the directory root of fsys (an embedded chart).
func LoadFS(fsys fs.FS, root string) (*chartv2.Chart, error) {
	var files []*archive.BufferedFile
	err := fs.WalkDir(fsys, root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := fs.ReadFile(fsys, path)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		files = append(files, &archive.BufferedFile{Name: filepath.ToSlash(rel), Data: data})
		return nil
	})
	if err != nil {
		return nil, err
	}
	return loader.LoadFiles(files)
}

// Render renders chart as release name in namespace with values and decodes every manifest that scheme knows, in
// Helm's install order. Kinds that scheme does not know are returned by name in unknown.
func Render(chart *chartv2.Chart, name, namespace string, values map[string]any, scheme *runtime.Scheme) (objs []client.Object, unknown []string, err error) {
	renderValues, err := commonutil.ToRenderValuesWithSchemaValidation(chart, values, common.ReleaseOptions{
		Name: name, Namespace: namespace, Revision: 1, IsInstall: true,
	}, &common.Capabilities{KubeVersion: kubeVersion, APIVersions: common.DefaultVersionSet}, false)
	if err != nil {
		return nil, nil, err
	}
	files, err := engine.Render(chart, renderValues)
	if err != nil {
		return nil, nil, fmt.Errorf("rendering chart %s: %w", chart.Name(), err)
	}
	for file := range files {
		if strings.HasSuffix(file, "NOTES.txt") || strings.HasPrefix(filepath.Base(file), "_") {
			delete(files, file)
		}
	}
	_, manifests, err := releaseutil.SortManifests(files, common.DefaultVersionSet, releaseutil.InstallOrder)
	if err != nil {
		return nil, nil, err
	}
	return decode(manifests, scheme)
}

// RenderAsGardener renders the chart in dir as Gardener's chart renderer (pkg/chartrenderer, the one extensions use
// for the charts they deploy) does, with its dependency conditions processed, and decodes it as Render does.
func RenderAsGardener(dir, name, namespace string, values map[string]any, scheme *runtime.Scheme) (objs []client.Object, unknown []string, err error) {
	archive, err := charts.ArchiveFS(os.DirFS(filepath.Dir(dir)), filepath.Base(dir))
	if err != nil {
		return nil, nil, err
	}
	release, err := GardenerRenderer().RenderArchive(archive, name, namespace, values)
	if err != nil {
		return nil, nil, err
	}
	return decode(release.Manifests, scheme)
}

// decode decodes every manifest that scheme knows, in the given order.
func decode(manifests []releaseutil.Manifest, scheme *runtime.Scheme) (objs []client.Object, unknown []string, err error) {
	decoder := serializer.NewCodecFactory(scheme, serializer.EnableStrict).UniversalDeserializer()
	for _, m := range manifests {
		for _, doc := range releaseutil.SplitManifests(m.Content) {
			if onlyComments(doc) {
				continue
			}
			obj, gvk, err := decoder.Decode([]byte(doc), nil, nil)
			if runtime.IsNotRegisteredError(err) {
				unknown = append(unknown, m.Name)
				continue
			}
			if err != nil {
				return nil, nil, fmt.Errorf("decoding %s: %w", m.Name, err)
			}
			cobj, ok := obj.(client.Object)
			if !ok {
				return nil, nil, fmt.Errorf("%s: %s is not an object", m.Name, gvk)
			}
			cobj.GetObjectKind().SetGroupVersionKind(*gvk)
			objs = append(objs, cobj)
		}
	}
	return objs, unknown, nil
}

// onlyComments tells whether a YAML document holds nothing but comments and blank lines, as Helm leaves them where a
// template's condition is false.
func onlyComments(doc string) bool {
	for _, line := range strings.Split(doc, "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			return false
		}
	}
	return true
}
