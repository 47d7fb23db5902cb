// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package selfhostedshootexposure

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	ciliumv2 "github.com/cilium/cilium/pkg/k8s/apis/cilium.io/v2"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	reconcilerutils "github.com/gardener/gardener/pkg/controllerutils/reconciler"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/addressing"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/apis/exposure"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/exposure/resources"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/scheme"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/fixtures"
)

var exposureService = &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "cilium-exposure-bare-metal"}}

// leaseSeconds is the duration of the leases the tests make: long enough that a lease renewed a second before the
// cases are built is still fresh when the last of them runs on a busy machine (they ran past 5 s in make test's
// unit group, beside the suites).
const leaseSeconds = 60

func lease(holder string, renewed time.Duration) *coordinationv1.Lease {
	renewTime := metav1.NewMicroTime(time.Now().Add(-renewed))
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "cilium-l2announce-kube-system-cilium-exposure-bare-metal"},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder), LeaseDurationSeconds: ptr.To[int32](leaseSeconds), RenewTime: &renewTime},
	}
}

// nodeConfig is node's CiliumBGPNodeConfig with the exposure's instance and one peer in state.
func nodeConfig(node, state string, advertised int32) *ciliumv2.CiliumBGPNodeConfig {
	return &ciliumv2.CiliumBGPNodeConfig{
		ObjectMeta: metav1.ObjectMeta{Name: node},
		Status: ciliumv2.CiliumBGPNodeStatus{BGPInstances: []ciliumv2.CiliumBGPNodeInstanceStatus{{
			Name: resources.BGPInstanceName,
			PeerStatuses: []ciliumv2.CiliumBGPNodePeerStatus{{
				Name: "tor-a", PeerAddress: "10.0.0.1", PeeringState: ptr.To(state),
				RouteCount: []ciliumv2.BGPFamilyRouteCount{{Afi: "ipv4", Safi: "unicast", Advertised: ptr.To(advertised)}},
			}},
		}}},
	}
}

func actuatorWith(objs ...client.Object) *actuator {
	for _, n := range fixtures.Nodes() {
		objs = append(objs, n)
	}
	c := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(objs...).WithStatusSubresource(&ciliumv2.CiliumBGPNodeConfig{}).Build()
	return &actuator{client: c, reader: c, recorder: events.NewFakeRecorder(10), ingressWait: 300 * time.Millisecond}
}

// built are the exposure's objects as the actuator applies them for cfg.
func built(t *testing.T, cfg *exposure.ExposureConfig) *resources.Objects {
	t.Helper()
	cfg.Pool = exposure.Pool{CIDRs: []string{"203.0.113.0/28"}}
	objs, err := resources.Build(resources.Input{
		Name: "bare-metal", Namespace: "kube-system", Port: 443, Endpoints: fixtures.Exposure("bare-metal", fixtures.Nodes()).Spec.Endpoints,
		Families: []addressing.Family{addressing.IPv4}, Config: cfg,
	})
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

func TestWaitForAnnouncement(t *testing.T) {
	l2 := &exposure.ExposureConfig{Announcement: exposure.AnnouncementL2}
	l2OnWorkers := &exposure.ExposureConfig{Announcement: exposure.AnnouncementL2, L2: &exposure.L2{
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelHostname: "worker-0"}},
	}}
	bgp := &exposure.ExposureConfig{Announcement: exposure.AnnouncementBGP, BGP: &exposure.BGP{LocalASN: ptr.To[int64](64512)}}
	for name, tc := range map[string]struct {
		cfg     *exposure.ExposureConfig
		objs    []client.Object
		want    []string // announcers; none: waiting
		waiting string
	}{
		"L2, no lease":              {cfg: l2, waiting: "no node took lease kube-system/cilium-l2announce-kube-system-cilium-exposure-bare-metal"},
		"L2, control-plane holder":  {cfg: l2, objs: []client.Object{lease("cp-1", time.Second)}, want: []string{"cp-1"}},
		"L2, worker holder":         {cfg: l2, objs: []client.Object{lease("worker-0", time.Second)}, waiting: "is held by worker-0, which the L2 policy does not select"},
		"L2, holder stopped":        {cfg: l2, objs: []client.Object{lease("cp-1", time.Hour)}, waiting: "of cp-1 is not renewed"},
		"L2, policy on the workers": {cfg: l2OnWorkers, objs: []client.Object{lease("worker-0", 0)}, want: []string{"worker-0"}},
		"BGP, no node config":       {cfg: bgp, waiting: "no CiliumBGPNodeConfig of a node the BGP configuration selects"},
		"BGP, session idle":         {cfg: bgp, objs: []client.Object{nodeConfig("cp-0", "active", 0)}, waiting: "no established BGP session that advertises routes in the CiliumBGPNodeConfigs of cp-0"},
		"BGP, nothing advertised":   {cfg: bgp, objs: []client.Object{nodeConfig("cp-0", "established", 0)}, waiting: "of cp-0"},
		"BGP, a worker's session":   {cfg: bgp, objs: []client.Object{nodeConfig("worker-0", "established", 1)}, waiting: "no CiliumBGPNodeConfig of a node the BGP configuration selects"},
		"BGP, two control-plane nodes": {cfg: bgp, objs: []client.Object{nodeConfig("cp-2", "established", 1), nodeConfig("cp-0", "established", 1), nodeConfig("cp-1", "idle", 0)},
			want: []string{"cp-0", "cp-2"}},
	} {
		t.Run(name, func(t *testing.T) {
			objs := built(t, tc.cfg)
			if objs.Service.Name != exposureService.Name {
				t.Fatalf("the exposure's Service is %s, the lease fixture is for %s", objs.Service.Name, exposureService.Name)
			}
			got, err := actuatorWith(tc.objs...).waitForAnnouncement(context.Background(), objs)
			if tc.waiting == "" {
				if err != nil || strings.Join(got, ",") != strings.Join(tc.want, ",") {
					t.Errorf("announcers %v (%v), want %v", got, err, tc.want)
				}
				return
			}
			requeue := &reconcilerutils.RequeueAfterError{}
			if !errors.As(err, &requeue) || !strings.Contains(err.Error(), "waiting for Cilium to announce the VIP: ") || !strings.Contains(err.Error(), tc.waiting) {
				t.Errorf("error %v, want a requeue that says %q", err, tc.waiting)
			}
		})
	}
}

// failingReader answers as its client does the first time, and then as fail says.
type failingReader struct {
	client.Client
	calls int
	fail  func(ctx context.Context) error
}

func (r *failingReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	r.calls++
	if r.calls > 1 {
		return r.fail(ctx)
	}
	return r.Client.Get(ctx, key, obj, opts...)
}

// cutOff blocks until the deadline and fails as a request to kube-apiserver cut off by it does.
func cutOff(ctx context.Context) error {
	<-ctx.Done()
	return ctx.Err()
}

// refused fails as client-go's rate limiter does when its wait would pass the context's deadline: with an error that
// is not the context's.
func refused(context.Context) error {
	return errors.New("client rate limiter Wait returned an error: rate: Wait(n=1) would exceed context deadline")
}

// TestWaitForAnnouncementKeepsWhatItFound: when the last look is cut off by the wait's deadline, the requeue still says
// what the looks before it found, not nothing.
func TestWaitForAnnouncementKeepsWhatItFound(t *testing.T) {
	a := actuatorWith(lease("worker-0", time.Second))
	a.reader = &failingReader{Client: a.client, fail: cutOff}
	_, err := a.waitForAnnouncement(context.Background(), built(t, &exposure.ExposureConfig{Announcement: exposure.AnnouncementL2}))
	requeue := &reconcilerutils.RequeueAfterError{}
	if !errors.As(err, &requeue) || !strings.Contains(err.Error(), "is held by worker-0, which the L2 policy does not select") {
		t.Errorf("error %v, want a requeue that says who holds the lease", err)
	}
}

// TestWaitForAnnouncementLooksAgainAfterAFailedRead: a read that fails (the rate limiter refusing near the deadline
// under load) neither ends the wait nor becomes the exposure's error while a complete look found what it waits for;
// without any complete look, the read's error is the result.
func TestWaitForAnnouncementLooksAgainAfterAFailedRead(t *testing.T) {
	a := actuatorWith(lease("worker-0", time.Second))
	reader := &failingReader{Client: a.client, fail: refused}
	// Three looks or more at its poll interval, also when a busy machine stalls the wait for a moment.
	a.reader, a.ingressWait = reader, 3*time.Second
	_, err := a.waitForAnnouncement(context.Background(), built(t, &exposure.ExposureConfig{Announcement: exposure.AnnouncementL2}))
	requeue := &reconcilerutils.RequeueAfterError{}
	if !errors.As(err, &requeue) || !strings.Contains(err.Error(), "is held by worker-0, which the L2 policy does not select") {
		t.Errorf("error %v, want a requeue that says who holds the lease", err)
	}
	if reader.calls < 3 {
		t.Errorf("the wait read %d times: a failed read ended it", reader.calls)
	}

	reader.calls = 1
	_, err = a.waitForAnnouncement(context.Background(), built(t, &exposure.ExposureConfig{Announcement: exposure.AnnouncementL2}))
	if err == nil || !strings.Contains(err.Error(), "rate limiter") {
		t.Errorf("error %v, want the failed reads' error when no look got through", err)
	}
}

// TestWaitForIngressReadsTheCurrentService: right after the Service was replaced, the informer's cache may still hold
// the old one with its ingress; the VIP counts as assigned only once kube-apiserver's Service has it.
func TestWaitForIngressReadsTheCurrentService(t *testing.T) {
	objs := built(t, &exposure.ExposureConfig{Announcement: exposure.AnnouncementBGP, BGP: &exposure.BGP{LocalASN: ptr.To[int64](64512)}})
	old := objs.Service.DeepCopy()
	old.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "203.0.113.10"}}
	cached := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(old, objs.Pool.DeepCopy()).Build()
	current := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(objs.Service.DeepCopy(), objs.Pool.DeepCopy()).Build()
	a := &actuator{client: cached, reader: current, recorder: events.NewFakeRecorder(10), ingressWait: 300 * time.Millisecond, pollInterval: 20 * time.Millisecond}
	ingress, err := a.waitForIngress(context.Background(), objs.Service, objs.Pool.Name, addressing.Pool{})
	var requeue *reconcilerutils.RequeueAfterError
	if !errors.As(err, &requeue) {
		t.Fatalf("got ingress %v, error %v; want a requeue while kube-apiserver's Service has no ingress", ingress, err)
	}
}
