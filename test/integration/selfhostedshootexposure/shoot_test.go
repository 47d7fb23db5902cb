// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package selfhostedshootexposure_test

import (
	"cmp"
	"context"
	"encoding/json"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	ciliumv2 "github.com/cilium/cilium/pkg/k8s/apis/cilium.io/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	gardencorev1beta1 "github.com/gardener/gardener/pkg/apis/core/v1beta1"
	extensionsv1alpha1 "github.com/gardener/gardener/pkg/apis/extensions/v1alpha1"
	"github.com/gardener/gardener/pkg/extensions"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/cilium"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/selfhosted"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/ciliumchart"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/fixtures"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/testenv"
)

// editShoot changes the Shoot in the Cluster resource, as gardenadm does when the Shoot changes, and undoes the
// change when the test ends.
func editShoot(t *testing.T, edit func(*gardencorev1beta1.Shoot)) {
	t.Helper()
	ctx := context.Background()
	cluster := &extensionsv1alpha1.Cluster{}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: selfhosted.ClusterName}, cluster); err != nil {
		t.Fatal(err)
	}
	original := cluster.Spec.Shoot.DeepCopy()
	shoot, err := extensions.ShootFromCluster(cluster)
	if err != nil {
		t.Fatal(err)
	}
	edit(shoot)
	raw, err := json.Marshal(shoot)
	if err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(cluster.DeepCopy())
	cluster.Spec.Shoot = runtime.RawExtension{Raw: raw}
	if err := env.Client.Patch(ctx, cluster, patch); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.Client.Get(ctx, client.ObjectKey{Name: selfhosted.ClusterName}, cluster); err != nil {
			t.Error(err)
			return
		}
		patch := client.MergeFrom(cluster.DeepCopy())
		cluster.Spec.Shoot = *original
		if err := env.Client.Patch(ctx, cluster, patch); err != nil {
			t.Error(err)
		}
	})
}

// storeGardenerConfig stores cilium-config as networking-cilium renders it for a Shoot with the L2 announcer and the
// BGP control plane on or off, through the webhook.
func storeGardenerConfig(t *testing.T, announcers bool) *corev1.ConfigMap {
	t.Helper()
	values := ciliumchart.GardenerValues(ciliumchart.GardenerVersion)
	values["global"].(map[string]any)["l2announcements"] = map[string]any{"enabled": announcers}
	values["global"].(map[string]any)["bgpControlPlane"] = map[string]any{"enabled": announcers}
	rendered, err := ciliumchart.RenderGardener(ciliumchart.GardenerVersion, values)
	if err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: cilium.Namespace, Name: cilium.ConfigMapName}}
	if _, err := controllerutil.CreateOrUpdate(context.Background(), env.Client, cm, func() error {
		cm.Data = maps.Clone(rendered.Config.Data)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return cm
}

// waitForError waits until the exposure's last error contains want.
func waitForError(t *testing.T, exp *extensionsv1alpha1.SelfHostedShootExposure, want string) {
	t.Helper()
	if err := env.Exposures().WaitForLastOperation(context.Background(), exp, 45*time.Second, func(*gardencorev1beta1.LastOperation) bool {
		return exp.Status.LastError != nil && strings.Contains(exp.Status.LastError.Description, want)
	}); err != nil {
		t.Fatalf("exposure %s never reported %q: %v (lastError %+v)", exp.Name, want, err, exp.Status.LastError)
	}
}

// TestPrerequisitesFromTheShoot: a Shoot whose NetworkConfig leaves Cilium's L2 announcer off, with networking-cilium's
// chart rendered for it. The webhook switches nothing on in cilium-config; the exposure names the Shoot field to set
// and creates nothing. Once the Shoot enables the announcer (an edit of the Cluster resource only) the exposure says
// that cilium-config does not have it yet; once the chart is rendered anew it succeeds. Nobody touches the exposure.
func TestPrerequisitesFromTheShoot(t *testing.T) {
	ctx := context.Background()
	t.Cleanup(func() { storeGardenerConfig(t, true) })
	editShoot(t, func(s *gardencorev1beta1.Shoot) {
		s.Spec.Networking.ProviderConfig = &runtime.RawExtension{Raw: []byte(
			`{"apiVersion":"cilium.networking.extensions.gardener.cloud/v1alpha1","kind":"NetworkConfig","l2Announcements":{"enabled":false}}`)}
	})
	cm := storeGardenerConfig(t, false)
	for _, key := range []string{"enable-l2-announcements", "enable-bgp-control-plane"} {
		if v := cm.Data[key]; v == "true" {
			t.Errorf("cilium-config has %s=%q, which the Shoot does not ask for", key, v)
		}
	}
	if v, ok := cm.Data["l2-announcements-lease-duration"]; ok {
		t.Errorf("the webhook put l2-announcements-lease-duration=%q into cilium-config without the announcer", v)
	}

	exp := createInPool(t, "prerequisites", "203.0.113.176/28", "203.0.113.178")
	t.Cleanup(func() { deleteAndWait(t, exp) })
	waitForError(t, exp, "shoot.spec.networking.providerConfig.l2Announcements.enabled: Invalid value: false")
	if got := owned(t, exp); len(got) != 0 {
		t.Errorf("a Shoot that cannot announce the VIP got objects: %v", got)
	}

	editShoot(t, func(s *gardencorev1beta1.Shoot) {
		s.Spec.Networking.ProviderConfig = &runtime.RawExtension{Raw: []byte(fixtures.NetworkConfig)}
	})
	waitForError(t, exp, `enable-l2-announcements="" (needs "true")`)

	cm = storeGardenerConfig(t, true)
	if cm.Data["enable-l2-announcements"] != "true" || cm.Data["l2-announcements-lease-duration"] != "5s" {
		t.Errorf("cilium-config with the announcer: %v", cm.Data)
	}
	waitUntilReady(t, exp)
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(exp), exp); err != nil {
		t.Fatal(err)
	}
	if _, pending := exp.Annotations["gardener.cloud/operation"]; pending {
		t.Errorf("annotations %v", exp.Annotations)
	}
}

// TestShootProviderConfigEditApplies: an exposure without a providerConfig of its own follows the Shoot's
// controlPlane.exposure.extension.providerConfig: a changed pinned VIP there reaches status.ingress, with only the
// Cluster resource edited, as gardenadm does.
func TestShootProviderConfigEditApplies(t *testing.T) {
	ctx := context.Background()
	createCiliumConfig(t)
	exp := fixtures.Exposure("follows-the-shoot", fixtures.Nodes())
	if err := env.Client.Create(ctx, exp); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteAndWait(t, exp) })
	waitUntilReady(t, exp)

	const moved = "203.0.113.12"
	editShoot(t, func(s *gardencorev1beta1.Shoot) {
		fixtures.WithExposureConfig(s, strings.Replace(fixtures.ExposureConfigL2, fixtures.ExposureVIP, moved, 1))
	})
	if err := testenv.WaitFor(ctx, 30*time.Second, func(ctx context.Context) (bool, error) {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(exp), exp); err != nil {
			return false, err
		}
		return len(exp.Status.Ingress) == 1 && exp.Status.Ingress[0].IP == moved, nil
	}); err != nil {
		t.Fatalf("status.ingress %+v, want %s after the Shoot's edit: %v (lastOperation %+v, lastError %+v)",
			exp.Status.Ingress, moved, err, exp.Status.LastOperation, exp.Status.LastError)
	}
}

// deleteAndWait deletes the exposure and waits until the extension has released it.
func deleteAndWait(t *testing.T, exp *extensionsv1alpha1.SelfHostedShootExposure) {
	t.Helper()
	if err := env.Client.Delete(context.Background(), exp); client.IgnoreNotFound(err) != nil {
		t.Error(err)
		return
	}
	if err := env.WaitUntilGone(context.Background(), exp, 45*time.Second); err != nil {
		t.Error(err)
	}
}

// watchOrder watches the Service svc and the BGP advertisements, and returns a function that lists what happened so
// far, in order ("CiliumBGPAdvertisement added", "Service deleted", ...).
func watchOrder(t *testing.T, svc *corev1.Service) func() []string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	c, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Client.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	type event struct {
		what     string
		revision uint64
	}
	var (
		mu     sync.Mutex
		events []event
	)
	for kind, list := range map[string]client.ObjectList{"Service": &corev1.ServiceList{}, "CiliumBGPAdvertisement": &ciliumv2.CiliumBGPAdvertisementList{}} {
		var opts []client.ListOption
		if kind == "Service" {
			opts = append(opts, client.InNamespace(svc.Namespace), client.MatchingFields{"metadata.name": svc.Name})
		}
		w, err := c.Watch(ctx, list, opts...)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			defer w.Stop()
			for e := range w.ResultChan() {
				obj, ok := e.Object.(client.Object)
				if !ok || (e.Type != watch.Added && e.Type != watch.Deleted) {
					continue
				}
				revision, err := strconv.ParseUint(obj.GetResourceVersion(), 10, 64)
				if err != nil {
					t.Errorf("%s %s: resourceVersion %q is no etcd revision: %v", kind, e.Type, obj.GetResourceVersion(), err)
				}
				mu.Lock()
				events = append(events, event{kind + " " + strings.ToLower(string(e.Type)), revision})
				mu.Unlock()
			}
		}()
	}
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		// Two watches deliver in their own time (under load the Service's came first); kube-apiserver's
		// resourceVersion is etcd's revision here, one sequence for every kind, so it orders the writes.
		sorted := slices.SortedStableFunc(slices.Values(events), func(a, b event) int { return cmp.Compare(a.revision, b.revision) })
		out := make([]string, len(sorted))
		for i, e := range sorted {
			out[i] = e.what
		}
		return out
	}
}
