// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package extensionpod_test

import (
	"context"
	"maps"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1beta1helper "github.com/gardener/gardener/pkg/api/core/v1beta1/helper"
	gardencorev1beta1 "github.com/gardener/gardener/pkg/apis/core/v1beta1"
	extensionsv1alpha1 "github.com/gardener/gardener/pkg/apis/extensions/v1alpha1"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/controller/selfhostedshootexposure"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/ciliumchart"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/fixtures"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/podrun"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/testenv"
)

// waitUntilPublished waits until the exposure's slices say want, and its EndpointsReady condition has reason, and
// returns how long that took (for the log: tests assert no timings; make bench measures them).
func waitUntilPublished(t *testing.T, exp *extensionsv1alpha1.SelfHostedShootExposure, want map[string]bool, reason string) time.Duration {
	t.Helper()
	ctx := context.Background()
	start := time.Now()
	if err := env.Exposures().WaitForPublished(ctx, exp, want, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	var condition *gardencorev1beta1.Condition
	if err := testenv.WaitFor(ctx, 30*time.Second, func(ctx context.Context) (bool, error) {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(exp), exp); err != nil {
			return false, err
		}
		condition = v1beta1helper.GetCondition(exp.Status.Conditions, selfhostedshootexposure.ConditionEndpointsReady)
		return condition != nil && condition.Reason == reason, nil
	}); err != nil {
		t.Fatalf("condition %+v, want reason %s: %v", condition, reason, err)
	}
	return time.Since(start)
}

func all(ready bool) map[string]bool {
	out := map[string]bool{}
	for _, ip := range controlPlaneIPs {
		out[ip] = ready
	}
	return out
}

func address(i int) string { return net.JoinHostPort(controlPlaneIPs[i], "443") }

// runExtensionPod hands the exposure controller to the extension run as its chart's pod on cp-0 in the sandbox until
// the test ends, and returns the pod's container.
func runExtensionPod(t *testing.T) *podrun.Started {
	t.Helper()
	pod, giveBack, err := sandbox.TakeOver(context.Background(), env, "cp-0", controlPlaneIPs[0], t.TempDir(), filepath.Join(env.Dir, "extension-pod.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("--- extension pod log ---\n%s", pod.LogTail(60))
		}
		if err := giveBack(); err != nil {
			t.Error(err)
		}
	})
	return pod
}

// exposureOfExtensionPod hands the exposure controller to the extension run as its chart's pod on cp-0, with Cilium's
// configuration as Gardener's chart makes it, and returns the exposure gardenadm would create for the nodes, not yet
// created.
func exposureOfExtensionPod(t *testing.T, name string) *extensionsv1alpha1.SelfHostedShootExposure {
	t.Helper()
	exp := fixtureExposure(t, name)
	runExtensionPod(t)
	return exp
}

// deleteExposure deletes exp and waits until it is gone, its probes stopped.
func deleteExposure(t *testing.T, exp *extensionsv1alpha1.SelfHostedShootExposure) {
	t.Helper()
	ctx := context.Background()
	if err := env.Client.Delete(ctx, exp); err != nil {
		t.Fatal(err)
	}
	if err := env.WaitUntilGone(ctx, exp, time.Minute); err != nil {
		t.Fatal(err)
	}
}

// fixtureExposure stores Cilium's configuration as Gardener's chart makes it and returns the exposure gardenadm would
// create for the nodes, not yet created.
func fixtureExposure(t *testing.T, name string) *extensionsv1alpha1.SelfHostedShootExposure {
	t.Helper()
	ctx := context.Background()
	if err := ciliumchart.CreateGardenerConfig(ctx, env.Client); err != nil {
		t.Fatal(err)
	}
	nodes := &corev1.NodeList{}
	if err := env.Client.List(ctx, nodes); err != nil {
		t.Fatal(err)
	}
	var items []*corev1.Node
	for i := range nodes.Items {
		items = append(items, &nodes.Items[i])
	}
	return fixtures.Exposure(name, items)
}

// TestUnreadyEndpointsAreTakenOut: the exposure publishes the three control-plane nodes as ready while their
// kube-apiservers answer /readyz. When one stops answering, exactly that endpoint is published not ready and not
// serving, and the condition names it; when it answers again, it is back. When all stop, all stay published and the
// condition says that the probes fail. Deleting the exposure stops its probes: no connection stays open.
func TestUnreadyEndpointsAreTakenOut(t *testing.T) {
	ctx := context.Background()
	exp := exposureOfExtensionPod(t, "bare-metal")
	if err := env.Client.Create(ctx, exp); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for i := range controlPlaneIPs {
			_ = sandbox.SwitchOn(address(i))
		}
		_ = env.Client.Delete(context.Background(), exp)
	})
	if err := testenv.WaitUntilReady(ctx, env.Client, exp, time.Minute); err != nil {
		t.Fatalf("the exposure never succeeded: %v (lastError %v)", err, exp.Status.LastError)
	}
	waitUntilPublished(t, exp, all(true), "EndpointsReady")

	sandbox.SwitchOff(address(1))
	took := waitUntilPublished(t, exp, map[string]bool{controlPlaneIPs[0]: true, controlPlaneIPs[1]: false, controlPlaneIPs[2]: true}, "EndpointsNotReady")
	t.Logf("cp-1's kube-apiserver refusing connections: published as not ready after %s", took)
	if c := v1beta1helper.GetCondition(exp.Status.Conditions, selfhostedshootexposure.ConditionEndpointsReady); !strings.Contains(c.Message, address(1)) ||
		strings.Contains(c.Message, address(0)) || strings.Contains(c.Message, address(2)) {
		t.Errorf("condition %q, want it to name %s alone", c.Message, address(1))
	}
	if err := sandbox.SwitchOn(address(1)); err != nil {
		t.Fatal(err)
	}
	took = waitUntilPublished(t, exp, all(true), "EndpointsReady")
	t.Logf("cp-1's kube-apiserver back: published as ready after %s", took)

	for i := range controlPlaneIPs {
		sandbox.SwitchOff(address(i))
	}
	waitUntilPublished(t, exp, all(true), "EndpointProbesFailing")
	for i := range controlPlaneIPs {
		if err := sandbox.SwitchOn(address(i)); err != nil {
			t.Fatal(err)
		}
	}
	waitUntilPublished(t, exp, all(true), "EndpointsReady")

	deleteExposure(t, exp)
	open := func() (n int) {
		for i := range controlPlaneIPs {
			ep, _ := sandbox.Endpoint(address(i))
			n += ep.Open()
		}
		return n
	}
	if err := testenv.WaitFor(ctx, 30*time.Second, func(context.Context) (bool, error) { return open() == 0, nil }); err != nil {
		t.Errorf("%d connections to the endpoints still open after the exposure is gone", open())
	}
}

// TestNewLeaderProbes: an exposure that one leader reconciled (env's extension, which does not probe) is probed by the
// next one (the chart's pod, which takes the lease over) without anything else changing. Gardener's generic reconciler
// does not reconcile an exposure whose last operation succeeded when its controller starts, and the probes start with
// a reconciliation; the leader trigger has the new leader reconcile it. Found by the datapath suite: after the
// leader's own kube-apiserver stopped, the next leader never took that endpoint out.
func TestNewLeaderProbes(t *testing.T) {
	ctx := context.Background()
	exp := fixtureExposure(t, "new-leader")
	if err := env.Client.Create(ctx, exp); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = sandbox.SwitchOn(address(2))
		_ = env.Client.Delete(context.Background(), exp)
	})
	if err := testenv.WaitUntilReady(ctx, env.Client, exp, time.Minute); err != nil {
		t.Fatalf("the exposure never succeeded: %v (lastError %v)", err, exp.Status.LastError)
	}
	runExtensionPod(t)
	sandbox.SwitchOff(address(2))
	took := waitUntilPublished(t, exp, map[string]bool{controlPlaneIPs[0]: true, controlPlaneIPs[1]: true, controlPlaneIPs[2]: false}, "EndpointsNotReady")
	t.Logf("cp-2's kube-apiserver refusing connections after the leader changed: published as not ready after %s", took)
}

// TestPodServesOnItsOwnAddresses: run as its chart's pod on cp-0 (host network: the pod's address is the node's
// InternalIP), the extension's metrics and health endpoints listen on that address alone, not on the node's loopback,
// where etcd and kube-apiserver's other listeners are, nor on the node's other addresses; its webhook server listens on
// the loopback alone, where the node's kube-apiserver calls it.
func TestPodServesOnItsOwnAddresses(t *testing.T) {
	ctx := context.Background()
	runExtensionPod(t)
	daemonSet := &appsv1.DaemonSet{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: testenv.ExtensionNamespace, Name: testenv.ServiceAccountName}, daemonSet); err != nil {
		t.Fatal(err)
	}
	container := daemonSet.Spec.Template.Spec.Containers[0]
	listens := map[int]string{container.ReadinessProbe.HTTPGet.Port.IntValue(): controlPlaneIPs[0]}
	for _, p := range container.Ports {
		listens[int(p.ContainerPort)] = map[string]string{"webhook-server": "127.0.0.1", "metrics": controlPlaneIPs[0]}[p.Name]
	}
	if len(listens) != 3 || slices.Contains(slices.Collect(maps.Values(listens)), "") {
		t.Fatalf("ports %v, want the health, webhook and metrics ports", listens)
	}
	dial := func(host string, port int) error {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		conn, err := sandbox.DialContext(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(port)))
		if err == nil {
			conn.Close()
		}
		return err
	}
	for port, address := range listens {
		// Readiness does not say that the metrics server listens: it starts beside the health server.
		if err := testenv.WaitFor(ctx, time.Minute, func(context.Context) (bool, error) {
			err := dial(address, port)
			return err == nil, err
		}); err != nil {
			t.Errorf("port %d on %s: %v", port, address, err)
		}
		for _, other := range []string{"127.0.0.1", controlPlaneIPs[0], controlPlaneIPs[1]} {
			if other == address {
				continue
			}
			if err := dial(other, port); err == nil {
				t.Errorf("port %d also answers on %s", port, other)
			}
		}
	}
}

// TestVIPAtTheGatewayIsRefused: the extension, run as its chart's pod on cp-0, reads the node's default route; an
// exposure that pins its VIP to that route's gateway (its announcer would answer ARP for the router) fails with an
// error naming the field, and nothing is applied.
func TestVIPAtTheGatewayIsRefused(t *testing.T) {
	ctx := context.Background()
	exp := exposureOfExtensionPod(t, "at-the-gateway")
	exp.Spec.ProviderConfig = &runtime.RawExtension{Raw: []byte(`{"apiVersion":"cilium-selfhosted.extensions.gardener.cloud/v1alpha1","kind":"ExposureConfig",` +
		`"announcement":"L2","pool":{"cidrs":["` + gateway + `/32"]},"loadBalancerIPs":["` + gateway + `"]}`)}
	if err := env.Client.Create(ctx, exp); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), exp) })
	want := `loadBalancerIPs[0]: Invalid value: "` + gateway + `": is the gateway of the node network`
	if err := testenv.WaitFor(ctx, time.Minute, func(ctx context.Context) (bool, error) {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(exp), exp); err != nil {
			return false, err
		}
		return exp.Status.LastError != nil && strings.Contains(exp.Status.LastError.Description, want), nil
	}); err != nil {
		t.Fatalf("lastError %+v, want one containing %q: %v", exp.Status.LastError, want, err)
	}
	if owned, err := env.Owned(ctx, exp.Namespace, exp.Name); err != nil || len(owned) != 0 {
		t.Errorf("objects applied for the refused exposure: %v (%v)", owned, err)
	}
}
