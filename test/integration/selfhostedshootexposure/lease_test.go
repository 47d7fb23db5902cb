// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package selfhostedshootexposure_test

import (
	"context"
	"strings"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/cilium"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/podrun"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/testenv"
)

// TestExtensionHandsLeasesOnlyToItsNode: the extension's token, bound to its pod on cp-1 as kubelet's projected token
// is (kube-apiserver then names the pod's node in the token's user info), may hand Cilium's L2 announcement lease of a
// Service to cp-1 and clear it (pkg/controller/l2handover), and nothing else a thief would try: hand it to cp-2, keep
// it for an hour, take kube-controller-manager's lease in kube-system, create a lease there. A token of the same
// ServiceAccount bound to no pod names no node and hands over to none.
func TestExtensionHandsLeasesOnlyToItsNode(t *testing.T) {
	ctx := context.Background()
	leases := map[string]*coordinationv1.Lease{}
	for _, name := range []string{cilium.L2AnnouncementLeaseName("kube-system", "cilium-exposure-handover"), "kube-controller-manager"} {
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: cilium.Namespace, Name: name},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("cp-0"), LeaseDurationSeconds: ptr.To[int32](5)}}
		if err := env.Client.Create(ctx, l); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), l) })
		leases[name] = l
	}
	onCP1 := extensionPodClient(ctx, t, "cp-1")
	unbound := env.ExtensionClient(t)
	announcement := cilium.L2AnnouncementLeaseName("kube-system", "cilium-exposure-handover")

	update := func(c client.Client, name string, change func(*coordinationv1.Lease)) error {
		l := &coordinationv1.Lease{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: cilium.Namespace, Name: name}, l); err != nil {
			t.Fatal(err)
		}
		change(l)
		return c.Update(ctx, l)
	}
	for _, tc := range []struct {
		what    string
		c       client.Client
		lease   string
		change  func(*coordinationv1.Lease)
		refused string // "" when allowed
	}{
		{"hand it to its own node", onCP1, announcement, func(l *coordinationv1.Lease) { l.Spec.HolderIdentity = ptr.To("cp-1") }, ""},
		{"clear it as client-go's release does", onCP1, announcement, func(l *coordinationv1.Lease) {
			l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds = ptr.To(""), ptr.To[int32](1)
		}, ""},
		{"take the released lease for an hour", onCP1, announcement, func(l *coordinationv1.Lease) {
			l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds = ptr.To("cp-1"), ptr.To[int32](3600)
		}, "spec.leaseDurationSeconds"},
		{"take the released lease for the exposure's 5 s", onCP1, announcement, func(l *coordinationv1.Lease) {
			l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds = ptr.To("cp-1"), ptr.To[int32](5)
		}, ""},
		{"hand it to another node", onCP1, announcement, func(l *coordinationv1.Lease) { l.Spec.HolderIdentity = ptr.To("cp-2") }, "only to the node of its own pod, cp-1, not cp-2"},
		{"keep it for an hour", onCP1, announcement, func(l *coordinationv1.Lease) {
			l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds = ptr.To("cp-1"), ptr.To[int32](3600)
		}, "spec.leaseDurationSeconds"},
		{"label it", onCP1, announcement, func(l *coordinationv1.Lease) { l.Labels = map[string]string{"stolen": "true"} }, "only the holder and times"},
		{"take kube-controller-manager's lease", onCP1, "kube-controller-manager", func(l *coordinationv1.Lease) { l.Spec.HolderIdentity = ptr.To("cp-1") },
			"only the L2 announcement leases of the exposures"},
		{"hand it over with a token bound to no pod", unbound, announcement, func(l *coordinationv1.Lease) { l.Spec.HolderIdentity = ptr.To("cp-1") }, "its token names no node"},
	} {
		err := update(tc.c, tc.lease, tc.change)
		switch {
		case tc.refused == "" && err != nil:
			t.Errorf("%s: %v", tc.what, err)
		case tc.refused != "" && (err == nil || !strings.Contains(err.Error(), "confine-lease-writes") || !strings.Contains(err.Error(), tc.refused)):
			t.Errorf("%s: %v, want a refusal by confine-lease-writes saying %q", tc.what, err, tc.refused)
		}
	}
	created := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: cilium.Namespace, Name: "cilium-l2announce-made-up"}}
	if err := onCP1.Create(ctx, created); err == nil {
		_ = env.Client.Delete(ctx, created)
		t.Error("the extension created a lease in kube-system")
	}
}

// extensionPodClient is a client with the token of an extension pod on node, bound to the pod as kubelet's projected
// token is.
func extensionPodClient(ctx context.Context, t *testing.T, node string) client.Client {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: testenv.ExtensionNamespace, Name: "extension-on-" + node},
		Spec: corev1.PodSpec{NodeName: node, ServiceAccountName: testenv.ServiceAccountName,
			Containers: []corev1.Container{{Name: "extension", Image: "extension"}}},
	}
	if err := env.Client.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), pod) })
	token, err := podrun.Token(ctx, env.Config, pod)
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(&rest.Config{Host: env.Config.Host, BearerToken: token, TLSClientConfig: rest.TLSClientConfig{CAData: env.Config.CAData}},
		client.Options{Scheme: env.Client.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}
