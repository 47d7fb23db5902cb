// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package selfhostedshootexposure_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	ciliumv2 "github.com/cilium/cilium/pkg/k8s/apis/cilium.io/v2"
	ciliumv2alpha1 "github.com/cilium/cilium/pkg/k8s/apis/cilium.io/v2alpha1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gardencorev1beta1 "github.com/gardener/gardener/pkg/apis/core/v1beta1"
	extensionsv1alpha1 "github.com/gardener/gardener/pkg/apis/extensions/v1alpha1"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/cilium"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/exposure/resources"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/ciliumchart"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/fixtures"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/testenv"
)

func labelsOf(exp *extensionsv1alpha1.SelfHostedShootExposure) client.MatchingLabels {
	return client.MatchingLabels(resources.Labels(exp.Name, exp.Namespace))
}

// owned counts the exposure's objects by kind.
func owned(t *testing.T, exp *extensionsv1alpha1.SelfHostedShootExposure) map[string]int {
	t.Helper()
	counts, err := env.Owned(context.Background(), exp.Namespace, exp.Name)
	if err != nil {
		t.Fatal(err)
	}
	return counts
}

// reconcile asks for a reconciliation the way Gardener does and waits until it has happened.
func reconcile(t *testing.T, exp *extensionsv1alpha1.SelfHostedShootExposure, mutate func(*extensionsv1alpha1.SelfHostedShootExposure)) {
	t.Helper()
	if err := env.Exposures().RequestReconcile(context.Background(), exp, mutate); err != nil {
		t.Fatal(err)
	}
}

// waitUntilReady waits until the exposure is ready as gardenadm checks it (testenv.WaitUntilReady).
func waitUntilReady(t *testing.T, exp *extensionsv1alpha1.SelfHostedShootExposure) {
	t.Helper()
	if err := testenv.WaitUntilReady(context.Background(), env.Client, exp, 45*time.Second); err != nil {
		t.Fatalf("exposure %s never became ready: %v", exp.Name, err)
	}
}

// waitForState waits until the exposure's last operation has the state and the annotation is gone.
func waitForState(t *testing.T, exp *extensionsv1alpha1.SelfHostedShootExposure, state gardencorev1beta1.LastOperationState) {
	t.Helper()
	if err := env.Exposures().WaitForLastOperation(context.Background(), exp, 45*time.Second, func(op *gardencorev1beta1.LastOperation) bool {
		return op.State == state
	}); err != nil {
		t.Fatalf("exposure %s never reached %s: %v (lastError %v)", exp.Name, state, err, exp.Status.LastError)
	}
}

func createCiliumConfig(t *testing.T) {
	t.Helper()
	rendered, err := ciliumchart.Render(ciliumVersion, ciliumchart.Values(ciliumVersion))
	if err != nil {
		t.Fatal(err)
	}
	cm := rendered.Config.DeepCopy()
	if err := env.Client.Create(context.Background(), cm); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// TestCiliumConfigGetsTheLeaseTimings: with the chart's L2 announcer on, the webhook adds the exposure's lease
// timings to cilium-config.
func TestCiliumConfigGetsTheLeaseTimings(t *testing.T) {
	createCiliumConfig(t)
	cm := &corev1.ConfigMap{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: cilium.Namespace, Name: cilium.ConfigMapName}, cm); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{
		"enable-lb-ipam": "true", "enable-l2-announcements": "true", "l2-announcements-lease-duration": "5s",
		"l2-announcements-renew-deadline": "3s", "l2-announcements-retry-period": "500ms",
	} {
		if cm.Data[k] != v {
			t.Errorf("cilium-config %s = %q, want %q", k, cm.Data[k], v)
		}
	}
}

// TestExposureLifecycle: create, VIP in status, endpoints change, L2 -> BGP, delete.
func TestExposureLifecycle(t *testing.T) {
	ctx := context.Background()
	createCiliumConfig(t)

	exp := fixtures.Exposure("bare-metal", fixtures.Nodes())
	start := time.Now()
	if err := env.Client.Create(ctx, exp); err != nil {
		t.Fatal(err)
	}
	waitUntilReady(t, exp)
	t.Logf("exposure Succeeded %s after creation", time.Since(start).Round(time.Millisecond))
	if len(exp.Status.Ingress) != 1 || exp.Status.Ingress[0].IP != fixtures.ExposureVIP {
		t.Fatalf("status.ingress %+v, want %s", exp.Status.Ingress, fixtures.ExposureVIP)
	}
	if !slices.Contains(exp.Finalizers, "extensions.gardener.cloud/selfhostedshootexposure") {
		t.Errorf("finalizers %v", exp.Finalizers)
	}
	if got, want := owned(t, exp), map[string]int{"Service": 1, "EndpointSlice": 1, "CiliumLoadBalancerIPPool": 1, "CiliumL2AnnouncementPolicy": 1}; !equalCounts(got, want) {
		t.Errorf("objects %v, want %v", got, want)
	}
	svc := &corev1.Service{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: resources.ServiceName(exp.Name)}, svc); err != nil {
		t.Fatal(err)
	}
	if *svc.Spec.LoadBalancerClass != "io.cilium/l2-announcer" || svc.Spec.Selector != nil {
		t.Errorf("service %+v", svc.Spec)
	}

	// Endpoints follow spec.endpoints.
	reconcile(t, exp, func(e *extensionsv1alpha1.SelfHostedShootExposure) { e.Spec.Endpoints = e.Spec.Endpoints[:2] })
	waitUntilReady(t, exp)
	sliceList := &discoveryv1.EndpointSliceList{}
	if err := env.Client.List(ctx, sliceList, labelsOf(exp)); err != nil {
		t.Fatal(err)
	}
	var addrs []string
	for _, s := range sliceList.Items {
		for _, e := range s.Endpoints {
			addrs = append(addrs, *e.NodeName+"="+strings.Join(e.Addresses, ","))
		}
	}
	if want := []string{"cp-0=10.0.1.10", "cp-1=10.0.1.11"}; !slices.Equal(addrs, want) {
		t.Errorf("endpoints %v, want %v", addrs, want)
	}

	// L2 -> BGP: the L2 policy goes, the BGP objects come, the Service is replaced for its new class, last.
	order := watchOrder(t, svc)
	reconcile(t, exp, func(e *extensionsv1alpha1.SelfHostedShootExposure) {
		e.Spec.ProviderConfig = &runtime.RawExtension{Raw: []byte(fixtures.ExposureConfigBGP)}
	})
	waitUntilReady(t, exp)
	// A watch begins with the existing Service's ADDED.
	if got := order(); slices.Index(got, "CiliumBGPAdvertisement added") < 0 || slices.Index(got, "Service deleted") < slices.Index(got, "CiliumBGPAdvertisement added") {
		t.Errorf("events in order %v: want the advertisement added before the Service of the old class is deleted", got)
	}
	if got, want := owned(t, exp), map[string]int{"Service": 1, "EndpointSlice": 1, "CiliumLoadBalancerIPPool": 1,
		"CiliumBGPAdvertisement": 1, "CiliumBGPClusterConfig": 1, "CiliumBGPPeerConfig": 2}; !equalCounts(got, want) {
		t.Errorf("objects %v, want %v", got, want)
	}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(svc), svc); err != nil {
		t.Fatal(err)
	}
	if *svc.Spec.LoadBalancerClass != "io.cilium/bgp-control-plane" {
		t.Errorf("loadBalancerClass %s", *svc.Spec.LoadBalancerClass)
	}
	if len(exp.Status.Ingress) != 1 || exp.Status.Ingress[0].IP != fixtures.ExposureVIP {
		t.Errorf("status.ingress %+v", exp.Status.Ingress)
	}

	// Delete: everything goes and the finalizer is released.
	if err := env.Client.Delete(ctx, exp); err != nil {
		t.Fatal(err)
	}
	if err := env.WaitUntilGone(ctx, exp, 45*time.Second); err != nil {
		t.Fatalf("the exposure was not released: %v", err)
	}
	if got := owned(t, exp); len(got) != 0 {
		t.Errorf("left behind: %v", got)
	}
}

// TestBadProviderConfig: a bad configuration is reported in lastError, naming the field, and creates nothing.
func TestBadProviderConfig(t *testing.T) {
	ctx := context.Background()
	createCiliumConfig(t)
	exp := fixtures.Exposure("bad-config", fixtures.Nodes())
	exp.Spec.ProviderConfig = &runtime.RawExtension{Raw: []byte(strings.Replace(fixtures.ExposureConfigL2, `"loadBalancerIPs":["203.0.113.10"]`, `"loadBalancerIPs":["198.51.100.1"]`, 1))}
	if err := env.Client.Create(ctx, exp); err != nil {
		t.Fatal(err)
	}
	waitForState(t, exp, gardencorev1beta1.LastOperationStateError)
	if exp.Status.LastError == nil || !strings.Contains(exp.Status.LastError.Description, "spec.providerConfig.loadBalancerIPs[0]") {
		t.Errorf("lastError %+v, want one naming spec.providerConfig.loadBalancerIPs[0]", exp.Status.LastError)
	}
	if got := owned(t, exp); len(got) != 0 {
		t.Errorf("a bad configuration created %v", got)
	}
	if err := env.Client.Delete(ctx, exp); err != nil {
		t.Fatal(err)
	}
}

func equalCounts(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestDeletionTouchesOnlyItsOwnObjects: deleting one exposure leaves another exposure's objects and the user's own
// Cilium objects alone.
func TestDeletionTouchesOnlyItsOwnObjects(t *testing.T) {
	ctx := context.Background()
	createCiliumConfig(t)

	userPool := &ciliumv2.CiliumLoadBalancerIPPool{ObjectMeta: metav1.ObjectMeta{Name: "user-pool", Labels: map[string]string{"app.kubernetes.io/managed-by": "someone-else"}},
		Spec: ciliumv2.CiliumLoadBalancerIPPoolSpec{Blocks: []ciliumv2.CiliumLoadBalancerIPPoolIPBlock{{Cidr: "198.51.100.0/28"}}}}
	userPolicy := &ciliumv2alpha1.CiliumL2AnnouncementPolicy{ObjectMeta: metav1.ObjectMeta{Name: "user-policy"},
		Spec: ciliumv2alpha1.CiliumL2AnnouncementPolicySpec{LoadBalancerIPs: true}}
	for _, obj := range []client.Object{userPool, userPolicy} {
		if err := env.Client.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}

	alpha := fixtures.Exposure("alpha", fixtures.Nodes())
	alpha.Spec.ProviderConfig = &runtime.RawExtension{Raw: []byte(fixtures.ExposureConfigL2)}
	beta := exposureInPool("beta", "203.0.113.16/28", "203.0.113.20")
	for _, exp := range []*extensionsv1alpha1.SelfHostedShootExposure{alpha, beta} {
		if err := env.Client.Create(ctx, exp); err != nil {
			t.Fatal(err)
		}
		waitUntilReady(t, exp)
	}
	betaBefore := owned(t, beta)

	if err := env.Client.Delete(ctx, alpha); err != nil {
		t.Fatal(err)
	}
	if err := env.WaitUntilGone(ctx, alpha, 45*time.Second); err != nil {
		t.Fatalf("alpha was not released: %v", err)
	}
	if got := owned(t, alpha); len(got) != 0 {
		t.Errorf("alpha left behind %v", got)
	}
	if got := owned(t, beta); !equalCounts(got, betaBefore) {
		t.Errorf("deleting alpha changed beta's objects: %v, before %v", got, betaBefore)
	}
	for _, obj := range []client.Object{userPool, userPolicy} {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			t.Errorf("the user's %s: %v", obj.GetName(), err)
		}
	}

	for _, obj := range []client.Object{beta, userPool, userPolicy} {
		if err := env.Client.Delete(ctx, obj); err != nil {
			t.Error(err)
		}
	}
}

// TestConflictingWriters: a user edits the exposure's Service and pool; the next reconciliation restores the fields the
// extension owns (server-side apply, forced) and leaves the user's own fields.
func TestConflictingWriters(t *testing.T) {
	ctx := context.Background()
	createCiliumConfig(t)
	exp := createInPool(t, "conflicts", "203.0.113.48/28", "203.0.113.50")
	defer func() { _ = env.Client.Delete(ctx, exp) }()
	waitUntilReady(t, exp)

	svc := &corev1.Service{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: resources.ServiceName(exp.Name)}, svc); err != nil {
		t.Fatal(err)
	}
	svc.Labels["team"] = "network"
	svc.Spec.AllocateLoadBalancerNodePorts = new(true)
	if err := env.Client.Update(ctx, svc, client.FieldOwner("kubectl-edit")); err != nil {
		t.Fatal(err)
	}
	pool := &ciliumv2.CiliumLoadBalancerIPPool{}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: "cilium-exposure-kube-system-conflicts"}, pool); err != nil {
		t.Fatal(err)
	}
	pool.Annotations = map[string]string{"note": "checked by the network team"}
	pool.Spec.Blocks = []ciliumv2.CiliumLoadBalancerIPPoolIPBlock{{Cidr: "203.0.113.0/24"}}
	if err := env.Client.Update(ctx, pool, client.FieldOwner("kubectl-edit")); err != nil {
		t.Fatal(err)
	}

	// The state is Succeeded before and after, and asking for a reconciliation bumps no generation: wait for the
	// outcome itself rather than for the state.
	reconcile(t, exp, func(*extensionsv1alpha1.SelfHostedShootExposure) {})
	restored := func(ctx context.Context) (bool, error) {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(svc), svc); err != nil {
			return false, err
		}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(pool), pool); err != nil {
			return false, err
		}
		return svc.Spec.AllocateLoadBalancerNodePorts != nil && !*svc.Spec.AllocateLoadBalancerNodePorts &&
			len(pool.Spec.Blocks) == 1 && pool.Spec.Blocks[0].Cidr == "203.0.113.48/28", nil
	}
	_ = testenv.WaitFor(ctx, 45*time.Second, restored)
	waitUntilReady(t, exp)

	if svc.Spec.AllocateLoadBalancerNodePorts == nil || *svc.Spec.AllocateLoadBalancerNodePorts || svc.Labels["team"] != "network" {
		t.Errorf("Service: allocateLoadBalancerNodePorts %v (want false restored), label team %q (want the user's kept)",
			svc.Spec.AllocateLoadBalancerNodePorts, svc.Labels["team"])
	}
	if len(pool.Spec.Blocks) != 1 || pool.Spec.Blocks[0].Cidr != "203.0.113.48/28" || pool.Annotations["note"] == "" {
		t.Errorf("pool: blocks %v (want ours restored), annotations %v (want the user's kept)", pool.Spec.Blocks, pool.Annotations)
	}
}

// TestExtensionRestartMidReconcileAndMidDelete: the extension killed while it creates and while it deletes an
// exposure converges after a restart, with no duplicate or orphaned objects.
func TestExtensionRestartMidReconcileAndMidDelete(t *testing.T) {
	ctx := context.Background()
	createCiliumConfig(t)
	exp := createInPool(t, "restarts", "203.0.113.64/28", "203.0.113.66")
	// Kill it as soon as it has started on the exposure (its finalizer is the first thing it writes).
	if err := testenv.WaitFor(ctx, 30*time.Second, func(ctx context.Context) (bool, error) {
		err := env.Client.Get(ctx, client.ObjectKeyFromObject(exp), exp)
		return len(exp.Finalizers) > 0, err
	}); err != nil {
		t.Fatal(err)
	}
	if err := env.Extensions().Restart(ctx, true); err != nil {
		t.Fatal(err)
	}
	waitUntilReady(t, exp)
	if got, want := owned(t, exp), map[string]int{"Service": 1, "EndpointSlice": 1, "CiliumLoadBalancerIPPool": 1, "CiliumL2AnnouncementPolicy": 1}; !equalCounts(got, want) {
		t.Errorf("after a restart mid-reconcile: %v, want %v", got, want)
	}

	if err := env.Client.Delete(ctx, exp); err != nil {
		t.Fatal(err)
	}
	if err := env.Extensions().Restart(ctx, true); err != nil {
		t.Fatal(err)
	}
	if err := env.WaitUntilGone(ctx, exp, 90*time.Second); err != nil {
		t.Fatalf("the exposure was not released after a restart mid-delete: %v", err)
	}
	if got := owned(t, exp); len(got) != 0 {
		t.Errorf("orphans after a restart mid-delete: %v", got)
	}
}

// exposureInPool is an exposure of the fixture's nodes with its own pool and pinned VIP, so that tests do not share
// addresses.
func exposureInPool(name, cidr, vip string) *extensionsv1alpha1.SelfHostedShootExposure {
	exp := fixtures.Exposure(name, fixtures.Nodes())
	exp.Spec.ProviderConfig = &runtime.RawExtension{Raw: []byte(strings.NewReplacer(
		"203.0.113.0/28", cidr, fixtures.ExposureVIP, vip).Replace(fixtures.ExposureConfigL2))}
	return exp
}

// createInPool creates exposureInPool's exposure.
func createInPool(t *testing.T, name, cidr, vip string) *extensionsv1alpha1.SelfHostedShootExposure {
	t.Helper()
	exp := exposureInPool(name, cidr, vip)
	if err := env.Client.Create(context.Background(), exp); err != nil {
		t.Fatal(err)
	}
	return exp
}

// TestAPIServerRestart: kube-apiserver restarts under the running extension, as its static pod does on a
// control-plane node (down from SIGTERM until it starts again, longer than the lease's renew deadline when watches
// keep it in its graceful shutdown). The extension does not exit, whether or not it kept its lease, and leads again
// once kube-apiserver is back. Afterwards an exposure changed and one created converge, each with exactly one object
// of each kind.
func TestAPIServerRestart(t *testing.T) {
	ctx := context.Background()
	createCiliumConfig(t)
	exp := createInPool(t, "apiserver-restart", "203.0.113.96/28", "203.0.113.98")
	waitUntilReady(t, exp)

	if err := env.RestartAPIServer(3 * time.Second); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	if err := testenv.WaitFor(ctx, 30*time.Second, func(ctx context.Context) (bool, error) {
		leases := &coordinationv1.LeaseList{}
		if err := env.Client.List(ctx, leases, client.InNamespace(testenv.ExtensionNamespace)); err != nil {
			return false, err
		}
		return slices.ContainsFunc(leases.Items, func(l coordinationv1.Lease) bool {
			return l.Spec.RenewTime != nil && l.Spec.RenewTime.After(back)
		}), nil
	}); err != nil {
		t.Fatalf("the extension does not lead again after kube-apiserver restarted: %v", err)
	}
	select {
	case <-env.Extension.Stopped():
		t.Fatalf("the extension exited when kube-apiserver restarted: %v\n%s", env.Extension.Err(), env.Extension.LogTail(40))
	default:
	}

	// kube-apiserver judges the extension's slices by the exposures its admission policy's param informer lists, which
	// it starts after it reports ready (kubernetes#141367): the endpoint change waits until the exposure's slice, as
	// it is, is admitted again, so that the suite's check for refusals of the extension (testenv's RunSuite) sees the
	// chart's, not the restart's (make test t3 of session 33: one refusal 3 s after the restart, none 0.2 s later).
	asExtension := env.ExtensionClient(t)
	if err := testenv.WaitFor(ctx, 30*time.Second, func(ctx context.Context) (bool, error) {
		list := &discoveryv1.EndpointSliceList{}
		if err := env.Client.List(ctx, list, labelsOf(exp)); err != nil || len(list.Items) == 0 {
			return false, err
		}
		slice := &list.Items[0]
		patch := client.MergeFrom(slice.DeepCopy())
		metav1.SetMetaDataAnnotation(&slice.ObjectMeta, "test.cilium-selfhosted/probe", back.String())
		if err := asExtension.Patch(ctx, slice, patch, client.DryRunAll); err != nil {
			t.Logf("the exposure's own slice, as it is, refused after the restart: %v", err)
			return false, nil
		}
		return true, nil
	}); err != nil {
		t.Fatalf("the exposure's own slice is not admitted after the restart: %v", err)
	}

	reconcile(t, exp, func(exp *extensionsv1alpha1.SelfHostedShootExposure) { exp.Spec.Endpoints = exp.Spec.Endpoints[1:] })
	waitUntilReady(t, exp)
	second := createInPool(t, "after-apiserver-restart", "203.0.113.112/28", "203.0.113.114")
	waitUntilReady(t, second)

	want := map[string]int{"Service": 1, "EndpointSlice": 1, "CiliumLoadBalancerIPPool": 1, "CiliumL2AnnouncementPolicy": 1}
	for _, e := range []*extensionsv1alpha1.SelfHostedShootExposure{exp, second} {
		if got := owned(t, e); !equalCounts(got, want) {
			t.Errorf("%s after kube-apiserver restarted: %v, want %v", e.Name, got, want)
		}
	}
	endpointSlices := &discoveryv1.EndpointSliceList{}
	if err := env.Client.List(ctx, endpointSlices, labelsOf(exp)); err != nil {
		t.Fatal(err)
	}
	if len(endpointSlices.Items) != 1 || len(endpointSlices.Items[0].Endpoints) != len(exp.Spec.Endpoints) {
		t.Errorf("the slice does not follow the endpoint change made after the restart: %+v", endpointSlices.Items)
	}
	if len(second.Status.Ingress) != 1 || second.Status.Ingress[0].IP != "203.0.113.114" {
		t.Errorf("ingress of the exposure created after the restart: %v, want 203.0.113.114", second.Status.Ingress)
	}
	for _, e := range []*extensionsv1alpha1.SelfHostedShootExposure{exp, second} {
		if err := env.Client.Delete(ctx, e); err != nil {
			t.Fatal(err)
		}
		if err := env.WaitUntilGone(ctx, e, 60*time.Second); err != nil {
			t.Fatal(err)
		}
	}
}
