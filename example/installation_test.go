// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package example

import (
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/util/sets"

	gardencorev1beta1 "github.com/gardener/gardener/pkg/apis/core/v1beta1"
	gardenerutils "github.com/gardener/gardener/pkg/utils/gardener"

	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/fixtures"
)

// TestGardenadmInstallsItWhereverCiliumRuns: gardenadm and gardenlet compute the extension kinds and types a shoot
// needs with gardenerutils.ComputeRequiredExtensionsForShoot, and install every registration that names one of them
// (pkg/gardenadm/botanist/extensions.go computeWantedControllerRegistrationNames, whose caller
// botanist.ComputeExtensions cannot be linked here: it needs a Gardener core validation that does not build with the
// pinned pkg/apis). A Cilium shoot exposed by this extension and one exposed by DNS, whose Cilium needs the webhook
// as much, both need a kind and type this registration names; a shoot with another network needs none.
func TestGardenadmInstallsItWhereverCiliumRuns(t *testing.T) {
	_, ours := registration(t)
	exposedBy := func(networking string, dns bool) *gardencorev1beta1.Shoot {
		shoot := fixtures.Shoot(true)
		shoot.Spec.Networking.Type = new(networking)
		if dns {
			shoot.Spec.Provider.Workers[0].ControlPlane.Exposure = &gardencorev1beta1.Exposure{DNS: &gardencorev1beta1.DNSExposure{}}
		}
		return shoot
	}
	list := &gardencorev1beta1.ControllerRegistrationList{Items: []gardencorev1beta1.ControllerRegistration{*ours}}
	for name, tc := range map[string]struct {
		shoot *gardencorev1beta1.Shoot
		want  []string // what of ours the shoot needs
	}{
		"Cilium, exposed by this extension": {exposedBy("cilium", false), []string{"Network/cilium", "SelfHostedShootExposure/cilium"}},
		"Cilium, exposed by DNS":            {exposedBy("cilium", true), []string{"Network/cilium"}},
		"Calico, exposed by DNS":            {exposedBy("calico", true), nil},
	} {
		t.Run(name, func(t *testing.T) {
			required := gardenerutils.ComputeRequiredExtensionsForShoot(tc.shoot, nil, list, nil, nil)
			var got []string
			for _, r := range ours.Spec.Resources {
				if id := gardenerutils.ExtensionsID(r.Kind, r.Type); required.Has(id) {
					got = append(got, id)
				}
			}
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Errorf("the shoot needs %v of this registration, want %v (all it needs: %v)", got, tc.want, sets.List(required))
			}
		})
	}
}
