// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package resources

import (
	"slices"
	"testing"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/addressing"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/apis/exposure"
)

// TestOwnedKindsCoverBuild: every object Build makes, for L2 and for BGP with its own cluster config and peers, is of
// a kind in OwnedKinds, with the scope OwnedKinds says, and carries the exposure's labels; and every owned kind is
// built by one of them. A kind missing from the list would be left behind by the cleanup and by the tests' leftover
// checks.
func TestOwnedKindsCoverBuild(t *testing.T) {
	bgp := &exposure.ExposureConfig{
		Announcement: exposure.AnnouncementBGP,
		Pool:         exposure.Pool{CIDRs: []string{"203.0.113.0/28"}},
		BGP:          &exposure.BGP{LocalASN: new(int64(64512)), Peers: []exposure.BGPPeer{{Name: "tor", Address: "10.0.0.1", ASN: 64500}}},
	}
	built := map[string]bool{}
	for _, cfg := range []*exposure.ExposureConfig{l2Config("203.0.113.0/28"), bgp} {
		objs, err := Build(input([]addressing.Family{addressing.IPv4}, cfg, endpoint("cp-0", internal("10.0.1.10"))))
		if err != nil {
			t.Fatal(err)
		}
		for _, obj := range objs.All() {
			gvk := obj.GetObjectKind().GroupVersionKind()
			i := slices.IndexFunc(OwnedKinds, func(k OwnedKind) bool { return k.GroupVersionKind == gvk })
			if i < 0 {
				t.Errorf("%s %s is of a kind missing from OwnedKinds", gvk, obj.GetName())
				continue
			}
			if namespaced := obj.GetNamespace() != ""; namespaced != OwnedKinds[i].Namespaced {
				t.Errorf("%s %s: namespaced %v, OwnedKinds says %v", gvk.Kind, obj.GetName(), namespaced, OwnedKinds[i].Namespaced)
			}
			for k, v := range Labels("bare-metal", "kube-system") {
				if obj.GetLabels()[k] != v {
					t.Errorf("%s %s lacks the label %s=%s", gvk.Kind, obj.GetName(), k, v)
				}
			}
			built[gvk.Kind] = true
		}
	}
	for _, k := range OwnedKinds {
		if !built[k.Kind] {
			t.Errorf("OwnedKinds lists %s, which Build never makes", k.Kind)
		}
	}
}
