// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package config

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	gardencorev1beta1 "github.com/gardener/gardener/pkg/apis/core/v1beta1"
	extensionsv1alpha1 "github.com/gardener/gardener/pkg/apis/extensions/v1alpha1"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/exposure/resources"
)

// FuzzLoad feeds arbitrary providerConfigs, seeded with the examples, through decoding, validation and the builders:
// nothing panics, and a configuration that loads builds objects for a valid exposure.
func FuzzLoad(f *testing.F) {
	examples, _ := filepath.Glob("../../../example/providerconfig-*.yaml")
	for _, e := range examples {
		b, err := os.ReadFile(e)
		if err != nil {
			f.Fatal(err)
		}
		js, err := yaml.YAMLToJSON(b)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(js, uint8(0))
	}
	f.Add([]byte(header+`"pool":{"cidrs":["203.0.113.0/28","2001:db8::/120"]},"loadBalancerIPs":["203.0.113.1"]}`), uint8(2))

	families := [][]gardencorev1beta1.IPFamily{{"IPv4"}, {"IPv6"}, {"IPv4", "IPv6"}}
	var endpoints []extensionsv1alpha1.ControlPlaneEndpoint
	for i := range 3 {
		endpoints = append(endpoints, extensionsv1alpha1.ControlPlaneEndpoint{NodeName: fmt.Sprintf("cp-%d", i), Addresses: []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("10.0.0.%d", i)}, {Type: corev1.NodeInternalIP, Address: fmt.Sprintf("fd00::%d", i)},
		}})
	}

	f.Fuzz(func(t *testing.T, raw []byte, familyIndex uint8) {
		shoot := shoot(families[int(familyIndex)%len(families)], "")
		exp := &extensionsv1alpha1.SelfHostedShootExposure{}
		exp.Name, exp.Namespace, exp.Spec.Port, exp.Spec.Endpoints = "fuzz", "kube-system", 443, endpoints
		exp.Spec.ProviderConfig = &runtime.RawExtension{Raw: raw}
		loaded, err := Load(exp, shoot, Site{})
		if err != nil {
			return
		}
		objs, err := resources.Build(loaded.Input(exp))
		if err != nil {
			t.Fatalf("a configuration that validates does not build: %v", err)
		}
		if objs.Service == nil || objs.Pool == nil || len(objs.EndpointSlices) == 0 {
			t.Fatalf("incomplete objects %+v", objs)
		}
	})
}
