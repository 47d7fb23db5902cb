// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package selfhostedshootexposure_test

import (
	"context"
	"strings"
	"testing"
	"time"

	ciliumv2 "github.com/cilium/cilium/pkg/k8s/apis/cilium.io/v2"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gardencorev1beta1 "github.com/gardener/gardener/pkg/apis/core/v1beta1"

	"github.com/gardener/gardener-extension-cilium-selfhosted/charts"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/apis/exposure"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/exposure/resources"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/scheme"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/fixtures"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/helm"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/testenv"
)

// declaredBGP is what a Shoot declares for its exposure in TestConfinedToWhatTheShootDeclares: the pool and the peer of
// exposureObjects' BGP exposure, with a password Secret.
const declaredBGP = `{"apiVersion":"cilium-selfhosted.extensions.gardener.cloud/v1alpha1","kind":"ExposureConfig","announcement":"BGP",` +
	`"pool":{"cidrs":["198.51.100.248/30"]},` +
	`"bgp":{"localASN":64512,"peers":[{"name":"tor","address":"10.255.0.1","asn":64513,"authSecretRef":"tor-password"}]}}`

// TestConfinedToWhatTheShootDeclares: the chart installed without the operator's values (which the suite's chart
// carries, so the test installs a copy of the writes policy as gardenlet renders it from the Shoot) lets the extension's
// token write exactly what the Shoot declares: its pool, its BGP peer with its ASN and password Secret, EndpointSlices
// in its node network; and refuses, naming the field, a pool, a peer, an ASN, a Secret and an endpoint outside them,
// each of which the suite's values would admit. A pool the Shoot declares for L2 must lie in its node network too. A
// Shoot that declares nothing allows no pool and no peer, and the message says what to declare.
func TestConfinedToWhatTheShootDeclares(t *testing.T) {
	ctx := context.Background()
	asExtension := env.ExtensionClient(t)
	bgp := exposureObjects(t, "declared", exposure.AnnouncementBGP)
	bgp.PeerConfigs[0].Spec.AuthSecretRef = new("tor-password")
	l2 := exposureObjects(t, "declared", exposure.AnnouncementL2)
	outsideThePool := changed(bgp.Pool, func(p *ciliumv2.CiliumLoadBalancerIPPool) {
		p.Spec.Blocks = []ciliumv2.CiliumLoadBalancerIPPoolIPBlock{{Cidr: "203.0.113.0/28"}}
	})

	t.Run("declared", func(t *testing.T) {
		withBoundsOf(t, fixtures.WithExposureConfig(fixtures.Shoot(true), declaredBGP), outsideThePool)
		declared(t, asExtension, bgp, l2, outsideThePool)
	})
	t.Run("L2 declared", func(t *testing.T) {
		// The same pool, declared for L2: outside the node network, refused though declared; inside it, admitted.
		outside := strings.NewReplacer(`"announcement":"BGP",`, ``, `"198.51.100.248/30"`, `"203.0.113.0/28"`).Replace(declaredBGP)
		withBoundsOf(t, fixtures.WithExposureConfig(fixtures.Shoot(true), outside), outsideThePool)
		err := asExtension.Create(ctx, outsideThePool, client.DryRunAll)
		if err == nil || !strings.Contains(err.Error(), "test-from-the-shoot") || !strings.Contains(err.Error(), "node network") {
			t.Errorf("a declared L2 pool outside the node network, written as the extension: %v, want a refusal that names the node network", err)
		}
	})
	t.Run("L2 declared in the node network", func(t *testing.T) {
		inside := strings.NewReplacer(`"announcement":"BGP",`, ``, `"198.51.100.248/30"`, `"10.0.255.0/28"`).Replace(declaredBGP)
		inThePool := changed(l2.Pool, func(p *ciliumv2.CiliumLoadBalancerIPPool) {
			p.Spec.Blocks = []ciliumv2.CiliumLoadBalancerIPPoolIPBlock{{Cidr: "10.0.255.0/28"}}
		})
		withBoundsOf(t, fixtures.WithExposureConfig(fixtures.Shoot(true), inside), outsideThePool)
		if err := asExtension.Create(ctx, inThePool, client.DryRunAll); err != nil {
			t.Errorf("a declared L2 pool in the node network, written as the extension: %v", err)
		}
	})
	t.Run("nothing declared", func(t *testing.T) {
		withBoundsOf(t, fixtures.Shoot(true), bgp.Pool)
		for _, obj := range []client.Object{bgp.Pool, bgp.ClusterConfig} {
			err := asExtension.Create(ctx, obj, client.DryRunAll)
			if err == nil || !strings.Contains(err.Error(), "test-from-the-shoot") || !strings.Contains(err.Error(), "none: declare") {
				t.Errorf("%T %s where the Shoot declares nothing: %v, want a refusal that says what to declare", obj, obj.GetName(), err)
			}
		}
	})
}

// declared checks the writes of TestConfinedToWhatTheShootDeclares where the Shoot declares declaredBGP.
func declared(t *testing.T, asExtension client.Client, bgp, l2 *resources.Objects, outsideThePool client.Object) {
	ctx := context.Background()
	for _, obj := range append(bgp.All(), l2.Pool, l2.L2Policy, changed(bgp.Pool, func(p *ciliumv2.CiliumLoadBalancerIPPool) {
		p.Spec.Blocks = []ciliumv2.CiliumLoadBalancerIPPoolIPBlock{{Start: "198.51.100.249", Stop: "198.51.100.250"}}
	})) {
		if err := asExtension.Create(ctx, obj, client.DryRunAll); err != nil {
			t.Errorf("%T %s within what the Shoot declares, written as the extension: %v", obj, obj.GetName(), err)
		}
	}
	for what, tc := range map[string]struct {
		obj   client.Object
		field string
	}{
		"a pool outside the Shoot's": {outsideThePool, "spec.blocks"},
		"a peer the Shoot does not declare": {changed(bgp.ClusterConfig, func(c *ciliumv2.CiliumBGPClusterConfig) {
			c.Spec.BGPInstances[0].Peers[0].PeerAddress = new("10.255.0.2")
		}), "spec.bgpInstances"},
		"the declared peer under another ASN": {changed(bgp.ClusterConfig, func(c *ciliumv2.CiliumBGPClusterConfig) {
			c.Spec.BGPInstances[0].Peers[0].PeerASN = new(int64(64999))
		}), "spec.bgpInstances"},
		"a peer's password from another Secret": {changed(bgp.PeerConfigs[0], func(p *ciliumv2.CiliumBGPPeerConfig) {
			p.Spec.AuthSecretRef = new("shoot-access-cluster-admin")
		}), "spec.authSecretRef"},
		"an endpoint outside the node network": {changed(bgp.EndpointSlices[0], func(s *discoveryv1.EndpointSlice) {
			s.Endpoints[0].Addresses = []string{"10.1.0.10"}
		}), "endpoints"},
	} {
		err := asExtension.Create(ctx, tc.obj, client.DryRunAll)
		if err == nil || !strings.Contains(err.Error(), "test-from-the-shoot") || !strings.Contains(err.Error(), tc.field+":") {
			t.Errorf("%s, written as the extension: %v, want a refusal by the policy from the Shoot naming %s", what, err, tc.field)
		}
	}
}

// withBoundsOf installs, until t ends, the chart's writes policy as gardenlet renders it for shoot with the chart's
// default values, under the name test-from-the-shoot, and waits until it refuses probe, which the suite's own policy
// admits; at the end it waits until probe passes again, for the tests that run after it.
func withBoundsOf(t *testing.T, shoot *gardencorev1beta1.Shoot, probe client.Object) {
	t.Helper()
	ctx := context.Background()
	values, err := testenv.ChartValues(shoot)
	if err != nil {
		t.Fatal(err)
	}
	chart, err := helm.LoadFS(charts.FS, charts.ChartPath)
	if err != nil {
		t.Fatal(err)
	}
	objs, _, err := helm.Render(chart, testenv.RegistrationName, testenv.ExtensionNamespace, values, scheme.New())
	if err != nil {
		t.Fatal(err)
	}
	var policy *admissionregistrationv1.ValidatingAdmissionPolicy
	for _, obj := range objs {
		if p, ok := obj.(*admissionregistrationv1.ValidatingAdmissionPolicy); ok && strings.HasSuffix(p.Name, "-confine-writes") {
			policy = p
		}
	}
	if policy == nil {
		t.Fatal("the chart has no writes policy")
	}
	policy.ObjectMeta = metav1.ObjectMeta{Name: "test-from-the-shoot"}
	asExtension := env.ExtensionClient(t)
	refused := func(ctx context.Context) bool {
		err := asExtension.Create(ctx, probe, client.DryRunAll)
		return err != nil && strings.Contains(err.Error(), policy.Name)
	}
	testenv.CreatePolicy(t, env.Client, policy, testenv.PolicyBinding(policy.Name, nil), refused)
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) { return refused(ctx), nil }); err != nil {
		t.Fatalf("policy %s not enforced: %v", policy.Name, err)
	}
}

// TestEndpointsAsGardenerWroteThem: the extension's token may give an exposure's EndpointSlice only the control-plane
// nodes Gardener wrote into the exposure's spec.endpoints, each by its own address: a worker, a member's address under
// another member's name and an address no node has are refused by the chart's policy, though all lie in the node
// network that -confine-writes allows.
func TestEndpointsAsGardenerWroteThem(t *testing.T) {
	ctx := context.Background()
	exp := inertExposure(t, "bounded")
	slice := exposureObjects(t, exp.Name, exposure.AnnouncementL2).EndpointSlices[0]
	slice.Endpoints = nil
	for _, m := range exp.Spec.Endpoints {
		slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{Addresses: []string{m.Addresses[0].Address}, NodeName: new(m.NodeName)})
	}
	asExtension := env.ExtensionClient(t)
	for what, endpoint := range map[string]discoveryv1.Endpoint{
		"a worker": {Addresses: []string{"10.0.2.10"}, NodeName: new("worker-0")},
		"a member's address under another's name": {Addresses: []string{"10.0.1.11"}, NodeName: new("cp-0")},
		"an address no node has":                  {Addresses: []string{"10.0.1.99"}, NodeName: new("cp-0")},
	} {
		attack := changed(slice, func(s *discoveryv1.EndpointSlice) { s.Endpoints = append(s.Endpoints, endpoint) })
		var err error
		// The policy reads its parameters, the exposures, from an informer: the new one may take a moment to arrive.
		if waitErr := testenv.WaitFor(ctx, 30*time.Second, func(ctx context.Context) (bool, error) {
			err = asExtension.Create(ctx, attack, client.DryRunAll)
			return err != nil && strings.Contains(err.Error(), "confine-endpoints"), nil
		}); waitErr != nil {
			t.Errorf("a slice of the exposure with %s as an endpoint, written as the extension: %v, want a refusal by the chart's policy", what, err)
		}
	}
	if err := asExtension.Create(ctx, slice, client.DryRunAll); err != nil {
		t.Errorf("the slice of the exposure's members, written as the extension: %v", err)
	}
}
