// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package exposure

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cilium/cilium/pkg/annotation"
	ciliumv2 "github.com/cilium/cilium/pkg/k8s/apis/cilium.io/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slimv1 "github.com/cilium/cilium/pkg/k8s/slim/k8s/apis/meta/v1"

	gardencorev1beta1 "github.com/gardener/gardener/pkg/apis/core/v1beta1"
	extensionsv1alpha1 "github.com/gardener/gardener/pkg/apis/extensions/v1alpha1"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/exposure/resources"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/fixtures"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/testenv"
)

const header = `{"apiVersion":"cilium-selfhosted.extensions.gardener.cloud/v1alpha1","kind":"ExposureConfig",`

// expose creates an exposure with providerConfig and waits until its last operation is final; it reports how long
// that took.
func expose(t *testing.T, name, providerConfig string, mutate ...func(*extensionsv1alpha1.SelfHostedShootExposure)) (*extensionsv1alpha1.SelfHostedShootExposure, time.Duration) {
	t.Helper()
	exp := fixtures.Exposure(name, fixtures.Nodes())
	exp.Spec.ProviderConfig = &runtime.RawExtension{Raw: []byte(providerConfig)}
	for _, m := range mutate {
		m(exp)
	}
	start := time.Now()
	if err := env.Client.Create(context.Background(), exp); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteExposure(t, exp) })
	waitForFinalState(t, exp)
	return exp, time.Since(start)
}

func waitForFinalState(t *testing.T, exp *extensionsv1alpha1.SelfHostedShootExposure) {
	t.Helper()
	if err := env.Exposures().WaitForLastOperation(context.Background(), exp, time.Minute, func(op *gardencorev1beta1.LastOperation) bool {
		return op.State == gardencorev1beta1.LastOperationStateSucceeded || op.State == gardencorev1beta1.LastOperationStateError
	}); err != nil {
		t.Fatalf("exposure %s has no final state: %v", exp.Name, err)
	}
}

func requireSucceeded(t *testing.T, exp *extensionsv1alpha1.SelfHostedShootExposure) {
	t.Helper()
	if op := exp.Status.LastOperation; op.State != gardencorev1beta1.LastOperationStateSucceeded {
		t.Fatalf("exposure %s: %s: %s\n--- operator log (tail) ---\n%s", exp.Name, op.State, op.Description, operator.LogTail(40))
	}
}

func deleteExposure(t *testing.T, exp *extensionsv1alpha1.SelfHostedShootExposure) {
	t.Helper()
	ctx := context.Background()
	if err := env.Client.Delete(ctx, exp); client.IgnoreNotFound(err) != nil {
		t.Error(err)
		return
	}
	if err := env.WaitUntilGone(ctx, exp, time.Minute); err != nil {
		t.Errorf("exposure %s was not deleted: %v", exp.Name, err)
	}
}

func ingressIPs(exp *extensionsv1alpha1.SelfHostedShootExposure) []string {
	var ips []string
	for _, in := range exp.Status.Ingress {
		ips = append(ips, in.IP)
	}
	return ips
}

// TestL2ExposureGetsItsVIPFromLBIPAM: pinned and unpinned VIPs assigned by Cilium's real LB-IPAM reach status.ingress.
func TestL2ExposureGetsItsVIPFromLBIPAM(t *testing.T) {
	pinned, took := expose(t, "l2-pinned", header+`"pool":{"cidrs":["203.0.113.0/28"]},"loadBalancerIPs":["203.0.113.10"]}`)
	requireSucceeded(t, pinned)
	t.Logf("pinned L2 exposure Succeeded %s after creation", took.Round(time.Millisecond))
	if got := ingressIPs(pinned); !slices.Equal(got, []string{"203.0.113.10"}) {
		t.Errorf("status.ingress %v, want the pinned 203.0.113.10", got)
	}

	unpinned, took := expose(t, "l2-unpinned", header+`"pool":{"ranges":[{"start":"203.0.113.20","stop":"203.0.113.29"}]}}`)
	requireSucceeded(t, unpinned)
	t.Logf("unpinned L2 exposure Succeeded %s after creation", took.Round(time.Millisecond))
	got := ingressIPs(unpinned)
	if len(got) != 1 {
		t.Fatalf("status.ingress %v", got)
	}
	if ip := netip.MustParseAddr(got[0]); ip.Less(netip.MustParseAddr("203.0.113.20")) || netip.MustParseAddr("203.0.113.29").Less(ip) {
		t.Errorf("VIP %s is outside the exposure's range", ip)
	}
}

// TestBGPExposure: the real operator derives a CiliumBGPNodeConfig for exactly the control-plane nodes, with the
// exposure's ASN and peers, and the advertisement selects the exposure's Service.
func TestBGPExposure(t *testing.T) {
	ctx := context.Background()
	exp, took := expose(t, "bgp", header+`"announcement":"BGP","pool":{"cidrs":["203.0.113.64/28"]},"loadBalancerIPs":["203.0.113.65"],`+
		`"bgp":{"localASN":64512,"peers":[{"name":"tor-a","address":"10.0.0.1","asn":64500},{"name":"tor-b","address":"10.0.0.2","asn":64501}]}}`)
	requireSucceeded(t, exp)
	t.Logf("BGP exposure Succeeded %s after creation", took.Round(time.Millisecond))

	if err := testenv.WaitFor(ctx, time.Minute, func(ctx context.Context) (bool, error) {
		configs := &ciliumv2.CiliumBGPNodeConfigList{}
		if err := env.Client.List(ctx, configs); err != nil {
			return false, err
		}
		var nodes []string
		for _, c := range configs.Items {
			nodes = append(nodes, c.Name)
			if len(c.Spec.BGPInstances) != 1 || c.Spec.BGPInstances[0].LocalASN == nil || *c.Spec.BGPInstances[0].LocalASN != 64512 {
				return false, fmt.Errorf("node config %s: instances %+v", c.Name, c.Spec.BGPInstances)
			}
			var peers []string
			for _, p := range c.Spec.BGPInstances[0].Peers {
				peers = append(peers, fmt.Sprintf("%s=%s/%d", p.Name, *p.PeerAddress, *p.PeerASN))
			}
			slices.Sort(peers)
			if want := []string{"tor-a=10.0.0.1/64500", "tor-b=10.0.0.2/64501"}; !slices.Equal(peers, want) {
				return false, fmt.Errorf("node config %s: peers %v, want %v", c.Name, peers, want)
			}
		}
		slices.Sort(nodes)
		if want := []string{"cp-0", "cp-1", "cp-2"}; !slices.Equal(nodes, want) {
			return false, fmt.Errorf("CiliumBGPNodeConfigs for %v, want %v", nodes, want)
		}
		return true, nil
	}); err != nil {
		t.Fatalf("the operator did not derive the node configs: %v\n--- operator log (tail) ---\n%s", err, operator.LogTail(40))
	}

	advertisements := &ciliumv2.CiliumBGPAdvertisementList{}
	if err := env.Client.List(ctx, advertisements, client.MatchingLabels(resources.Labels(exp.Name, exp.Namespace))); err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: exp.Namespace, Name: resources.ServiceName(exp.Name)}, svc); err != nil {
		t.Fatal(err)
	}
	if len(advertisements.Items) != 1 {
		t.Fatalf("%d advertisements", len(advertisements.Items))
	}
	sel := advertisements.Items[0].Spec.Advertisements[0].Selector
	if !labels.SelectorFromSet(sel.MatchLabels).Matches(asCiliumSees(svc)) {
		t.Errorf("the advertisement's selector %v does not select Service %s (%v)", sel.MatchLabels, svc.Name, svc.Labels)
	}
	if got := ingressIPs(exp); !slices.Equal(got, []string{"203.0.113.65"}) {
		t.Errorf("status.ingress %v", got)
	}
}

// TestPoolConflict: a user's pool that overlaps the exposure's, created first, makes Cilium mark the exposure's pool as
// conflicting; the exposure says so.
func TestPoolConflict(t *testing.T) {
	ctx := context.Background()
	userPool := &ciliumv2.CiliumLoadBalancerIPPool{
		ObjectMeta: metav1.ObjectMeta{Name: "user-pool"},
		Spec:       ciliumv2.CiliumLoadBalancerIPPoolSpec{Blocks: []ciliumv2.CiliumLoadBalancerIPPoolIPBlock{{Cidr: "203.0.113.96/28"}}},
	}
	if err := env.Client.Create(ctx, userPool); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), userPool) })
	// LB-IPAM orders pools by creation time, which kube-apiserver stamps in whole seconds: ours must be younger, so
	// it is created once kube-apiserver's clock has passed the user pool's second (a dry-run create reads that clock).
	if err := testenv.WaitFor(ctx, 5*time.Second, func(ctx context.Context) (bool, error) {
		probe := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", GenerateName: "clock-"}}
		if err := env.Client.Create(ctx, probe, client.DryRunAll); err != nil {
			return false, err
		}
		return probe.CreationTimestamp.After(userPool.CreationTimestamp.Time), nil
	}); err != nil {
		t.Fatal(err)
	}

	exp, _ := expose(t, "conflict", header+`"pool":{"cidrs":["203.0.113.96/28"]}}`)
	if exp.Status.LastOperation.State != gardencorev1beta1.LastOperationStateError || exp.Status.LastError == nil ||
		!strings.Contains(exp.Status.LastError.Description, "conflicts with another pool") && !strings.Contains(exp.Status.LastError.Description, "not in the exposure's pool") {
		t.Fatalf("last operation %+v, lastError %+v, want Cilium's pool conflict", exp.Status.LastOperation, exp.Status.LastError)
	}
	t.Logf("lastError: %s", exp.Status.LastError.Description)
}

// TestDualStack: a dual-stack shoot gets an IPv4 and an IPv6 VIP.
func TestDualStack(t *testing.T) {
	setFamilies(t, gardencorev1beta1.IPFamilyIPv4, gardencorev1beta1.IPFamilyIPv6)
	t.Cleanup(func() { setFamilies(t, gardencorev1beta1.IPFamilyIPv4) })

	exp, took := expose(t, "dual-stack", header+`"pool":{"cidrs":["203.0.113.128/28","2001:db8::/124"]}}`, func(e *extensionsv1alpha1.SelfHostedShootExposure) {
		for i := range e.Spec.Endpoints {
			e.Spec.Endpoints[i].Addresses = append(e.Spec.Endpoints[i].Addresses,
				corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("fd00::1:%d", 10+i)})
		}
	})
	requireSucceeded(t, exp)
	t.Logf("dual-stack exposure Succeeded %s after creation", took.Round(time.Millisecond))
	got := ingressIPs(exp)
	if len(got) != 2 || !netip.MustParseAddr(got[0]).Is4() && !netip.MustParseAddr(got[1]).Is4() || netip.MustParseAddr(got[0]).Is4() == netip.MustParseAddr(got[1]).Is4() {
		t.Errorf("status.ingress %v, want an IPv4 and an IPv6 VIP", got)
	}
}

func setFamilies(t *testing.T, families ...gardencorev1beta1.IPFamily) {
	t.Helper()
	shoot := fixtures.WithExposureConfig(fixtures.Shoot(true), fixtures.ExposureConfigL2)
	shoot.Spec.Networking.IPFamilies = families
	cluster := &extensionsv1alpha1.Cluster{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Name: "kube-system"}, cluster); err != nil {
		t.Fatal(err)
	}
	cluster.Spec = fixtures.Cluster(shoot).Spec
	if err := env.Client.Update(context.Background(), cluster); err != nil {
		t.Fatal(err)
	}
}

// TestDeleteReleasesTheVIP: after deletion nothing of the exposure is left and a new Service can take its VIP.
func TestDeleteReleasesTheVIP(t *testing.T) {
	ctx := context.Background()
	exp, _ := expose(t, "released", header+`"pool":{"cidrs":["203.0.113.160/28"]},"loadBalancerIPs":["203.0.113.161"]}`)
	requireSucceeded(t, exp)
	deleteExposure(t, exp)

	if left, err := env.Owned(ctx, exp.Namespace, exp.Name); err != nil || len(left) != 0 {
		t.Errorf("left behind: %v %v", left, err)
	}

	// A Service of the user's, pinned to the released VIP, in a pool of the user's that covers it.
	pool := &ciliumv2.CiliumLoadBalancerIPPool{
		ObjectMeta: metav1.ObjectMeta{Name: "reuse"},
		Spec: ciliumv2.CiliumLoadBalancerIPPoolSpec{
			Blocks:          []ciliumv2.CiliumLoadBalancerIPPoolIPBlock{{Cidr: "203.0.113.160/28"}},
			ServiceSelector: &slimv1.LabelSelector{MatchLabels: map[string]string{"test": "reuse"}},
		},
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "reuse", Namespace: "default", Labels: map[string]string{"test": "reuse"},
			Annotations: map[string]string{annotation.LBIPAMIPsKey: "203.0.113.161"}},
		Spec: corev1.ServiceSpec{
			Type:              corev1.ServiceTypeLoadBalancer,
			LoadBalancerClass: new("io.cilium/l2-announcer"),
			Ports:             []corev1.ServicePort{{Name: "https", Port: 443}},
		},
	}
	for _, obj := range []client.Object{pool, svc} {
		if err := env.Client.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), obj) })
	}
	if err := testenv.WaitFor(ctx, 30*time.Second, func(ctx context.Context) (bool, error) {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(svc), svc); err != nil {
			return false, err
		}
		in := svc.Status.LoadBalancer.Ingress
		return len(in) == 1 && in[0].IP == "203.0.113.161", nil
	}); err != nil {
		t.Errorf("the released VIP was not assigned to a new Service: %v (ingress %v)", err, svc.Status.LoadBalancer.Ingress)
	}
}
