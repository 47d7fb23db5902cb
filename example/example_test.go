// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

// Package example holds the manifests an operator starts from; its test keeps them valid and generated ones current.
package example

import (
	"bufio"
	"bytes"
	"maps"
	"os"
	"strings"
	"testing"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/apimachinery/pkg/version"
	sigsyaml "sigs.k8s.io/yaml"

	gardencorev1 "github.com/gardener/gardener/pkg/apis/core/v1"
	gardencorev1beta1 "github.com/gardener/gardener/pkg/apis/core/v1beta1"
	extensionsv1alpha1 "github.com/gardener/gardener/pkg/apis/extensions/v1alpha1"
	operatorv1alpha1 "github.com/gardener/gardener/pkg/apis/operator/v1alpha1"
	"github.com/gardener/gardener/pkg/chartrenderer"
	"github.com/gardener/gardener/pkg/utils/gardener/operator"

	"github.com/gardener/gardener-extension-cilium-selfhosted/charts"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/exposure/config"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/fixtures"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/testenv"
)

func read(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestControllerRegistrationIsCurrent(t *testing.T) {
	want, err := charts.ControllerRegistration()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(read(t, "controller-registration.yaml"), want) {
		t.Fatal("controller-registration.yaml is stale: run `make generate`")
	}
}

// TestExtensionIsCurrent: extension.yaml is what make generate writes for VERSION.
func TestExtensionIsCurrent(t *testing.T) {
	want, err := charts.ExampleExtension(strings.TrimSpace(string(read(t, "../VERSION"))))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(read(t, "extension.yaml"), want) {
		t.Fatal("extension.yaml is stale: run `make generate`")
	}
}

// TestExtensionRegistersWhatTheRegistrationDoes: the operator Extension, as gardener-operator and gardenadm turn it
// into a ControllerRegistration and ControllerDeployment (ControllerRegistrationForExtension), registers the extension
// for the same resources with the same pod security level as controller-registration.yaml, and pulls the chart of
// VERSION from its OCI repository.
func TestExtensionRegistersWhatTheRegistrationDoes(t *testing.T) {
	s := runtime.NewScheme()
	if err := operatorv1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	raw, err := sigsyaml.YAMLToJSON(read(t, "extension.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	obj, _, err := serializer.NewCodecFactory(s, serializer.EnableStrict).UniversalDeserializer().Decode(raw, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	converted, deployment := operator.ControllerRegistrationForExtension(obj.(*operatorv1alpha1.Extension))
	_, want := registration(t)
	if !apiequality.Semantic.DeepEqual(converted.Spec.Resources, want.Spec.Resources) || !maps.Equal(converted.Annotations, want.Annotations) {
		t.Errorf("the Extension registers %+v with annotations %v; controller-registration.yaml %+v with %v",
			converted.Spec.Resources, converted.Annotations, want.Spec.Resources, want.Annotations)
	}
	if url := deployment.Helm.OCIRepository.GetURL(); !strings.HasSuffix(url, ":"+strings.TrimSpace(string(read(t, "../VERSION")))) {
		t.Errorf("the Extension pulls the chart from %s, want VERSION's tag", url)
	}
}

// registration decodes controller-registration.yaml strictly.
func registration(t *testing.T) (*gardencorev1.ControllerDeployment, *gardencorev1beta1.ControllerRegistration) {
	t.Helper()
	s := runtime.NewScheme()
	if err := gardencorev1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := gardencorev1beta1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	decoder := serializer.NewCodecFactory(s, serializer.EnableStrict).UniversalDeserializer()
	reader := yaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(read(t, "controller-registration.yaml"))))
	var deployment *gardencorev1.ControllerDeployment
	var registration *gardencorev1beta1.ControllerRegistration
	for {
		doc, err := reader.Read()
		if err != nil {
			break
		}
		obj, _, err := decoder.Decode(doc, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		switch o := obj.(type) {
		case *gardencorev1.ControllerDeployment:
			deployment = o
		case *gardencorev1beta1.ControllerRegistration:
			registration = o
		}
	}
	if deployment == nil || registration == nil {
		t.Fatal("want a ControllerDeployment and a ControllerRegistration")
	}
	return deployment, registration
}

func TestControllerRegistration(t *testing.T) {
	deployment, registration := registration(t)
	r := registration.Spec.Resources
	if len(r) != 2 || r[0].Kind != extensionsv1alpha1.SelfHostedShootExposureResource || r[0].Type != "cilium" ||
		r[1].Kind != extensionsv1alpha1.NetworkResource || r[1].Type != "cilium" || r[1].Primary == nil || *r[1].Primary {
		t.Errorf("resources %+v, want SelfHostedShootExposure/cilium and Network/cilium, not primary", r)
	}
	if refs := registration.Spec.Deployment.DeploymentRefs; len(refs) != 1 || refs[0].Name != deployment.Name {
		t.Errorf("deployment refs %+v", refs)
	}
	// As gardenlet renders it on a self-hosted shoot.
	values, err := testenv.ChartValues(fixtures.Shoot(true))
	if err != nil {
		t.Fatal(err)
	}
	rendered, err := chartrenderer.NewWithServerVersion(&version.Info{GitVersion: "v1.36.3", Major: "1", Minor: "36"}).
		RenderArchive(deployment.Helm.RawChart, testenv.RegistrationName, testenv.ExtensionNamespace, values)
	if err != nil || len(rendered.AsSecretData()) == 0 {
		t.Errorf("the inlined chart does not render: %v", err)
	}
}

func TestProviderConfigs(t *testing.T) {
	for _, name := range []string{"providerconfig-l2.yaml", "providerconfig-bgp.yaml"} {
		raw, err := sigsyaml.YAMLToJSON(read(t, name))
		if err != nil {
			t.Fatal(err)
		}
		shoot := &gardencorev1beta1.Shoot{Spec: gardencorev1beta1.ShootSpec{Provider: gardencorev1beta1.Provider{Workers: []gardencorev1beta1.Worker{{
			ControlPlane: &gardencorev1beta1.WorkerControlPlane{Exposure: &gardencorev1beta1.Exposure{Extension: &gardencorev1beta1.ExtensionExposure{
				ProviderConfig: &runtime.RawExtension{Raw: raw},
			}}},
		}}}}}
		if _, err := config.Load(nil, shoot, config.Site{}); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestShoots: the complete gardenadm Shoots decode strictly, their exposure configuration loads and validates, and
// their networking meets the exposure's prerequisites.
func TestShoots(t *testing.T) {
	s := runtime.NewScheme()
	if err := gardencorev1beta1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"shoot-gardenadm-l2.yaml", "shoot-gardenadm-bgp.yaml"} {
		t.Run(name, func(t *testing.T) {
			raw, err := sigsyaml.YAMLToJSON(read(t, name))
			if err != nil {
				t.Fatal(err)
			}
			obj, _, err := serializer.NewCodecFactory(s, serializer.EnableStrict).UniversalDeserializer().Decode(raw, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			shoot := obj.(*gardencorev1beta1.Shoot)
			loaded, err := config.Load(nil, shoot, config.Site{})
			if err != nil {
				t.Fatal(err)
			}
			cfg := loaded.Config
			if err := config.CheckPrerequisites(shoot, cfg); err != nil {
				t.Error(err)
			}
		})
	}
}
