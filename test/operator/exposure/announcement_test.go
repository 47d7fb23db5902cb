// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package exposure

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	ciliumv2alpha1 "github.com/cilium/cilium/pkg/k8s/apis/cilium.io/v2alpha1"
	slimv1 "github.com/cilium/cilium/pkg/k8s/slim/k8s/apis/meta/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gardencorev1beta1 "github.com/gardener/gardener/pkg/apis/core/v1beta1"
	extensionsv1alpha1 "github.com/gardener/gardener/pkg/apis/extensions/v1alpha1"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/cilium"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/exposure/resources"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/ciliumfake"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/testenv"
)

// holdLease takes the L2 announcement lease of the exposure's Service for node and renews it until
// stopped (at the latest when the test ends), as the agent of node would once the L2 policy selects it
// (pkg/l2announcer, client-go leader election). No agents run in this suite; test/agents/datapath has real ones.
func holdLease(t *testing.T, serviceName, node string) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	name := cilium.L2AnnouncementLeaseName(cilium.Namespace, serviceName)
	renew := func(ctx context.Context) (bool, error) {
		if err := ciliumfake.HoldL2Lease(ctx, env.Client, name, node); err != nil {
			t.Logf("renewing lease %s: %v", name, err)
		}
		return false, nil
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = wait.PollUntilContextCancel(ctx, 500*time.Millisecond, true, renew)
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			<-done
			_ = env.Client.Delete(context.Background(), &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: cilium.Namespace, Name: name}})
		})
	}
	t.Cleanup(stop)
	return stop
}

// waitForLastError waits until the exposure's last error contains want, and that it is not Succeeded meanwhile.
func waitForLastError(t *testing.T, exp *extensionsv1alpha1.SelfHostedShootExposure, want string) {
	t.Helper()
	var got string
	if err := testenv.WaitFor(context.Background(), time.Minute, func(ctx context.Context) (bool, error) {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(exp), exp); err != nil {
			return false, err
		}
		if op := exp.Status.LastOperation; op != nil && op.State == gardencorev1beta1.LastOperationStateSucceeded {
			return false, fmt.Errorf("Succeeded while nobody announces its VIP: %s", op.Description)
		}
		if exp.Status.LastError != nil {
			got = exp.Status.LastError.Description
		}
		return strings.Contains(got, want), nil
	}); err != nil {
		t.Fatalf("exposure %s never reported %q: %v; last error %q", exp.Name, want, err, got)
	}
}

// TestSucceededMeansAnnounced: with the real operator, LB-IPAM assigns the VIP at once, but the exposure is not
// Succeeded until a node the L2 policy selects holds and renews the Service's announcement lease, and says what it
// waits for, by name: no lease, then a lease held by a worker (which the policy does not select). Once a
// control-plane node holds it, the exposure is Succeeded and an event says which node announces.
func TestSucceededMeansAnnounced(t *testing.T) {
	ctx := context.Background()
	exp, _ := expose(t, unannounced, header+`"pool":{"cidrs":["203.0.113.192/28"]},"loadBalancerIPs":["203.0.113.193"]}`)
	service := resources.ServiceName(exp.Name)
	lease := cilium.Namespace + "/" + cilium.L2AnnouncementLeaseName(exp.Namespace, service)
	waitForLastError(t, exp, "waiting for Cilium to announce the VIP: no node took lease "+lease)
	svc := &corev1.Service{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: exp.Namespace, Name: service}, svc); err != nil {
		t.Fatal(err)
	}
	if len(svc.Status.LoadBalancer.Ingress) == 0 || *svc.Spec.LoadBalancerClass != ciliumv2alpha1.L2AnnounceLoadBalancerClass {
		t.Fatalf("LB-IPAM has not assigned the VIP, so the wait says nothing: %+v", svc.Status)
	}

	stopWorker := holdLease(t, service, "worker-0")
	waitForLastError(t, exp, "lease "+lease+" is held by worker-0, which the L2 policy does not select")
	stopWorker()

	holdLease(t, service, "cp-1")
	if err := testenv.WaitUntilReady(ctx, env.Client, exp, time.Minute); err != nil {
		t.Fatalf("the exposure did not succeed once cp-1 announced: %v (%+v)", err, exp.Status.LastError)
	}
	if err := testenv.WaitForEvent(ctx, env.Client, exp.Namespace, func(e corev1.Event) bool {
		return e.InvolvedObject.Name == exp.Name && e.Reason == "Announced" && strings.Contains(e.Message, "203.0.113.193 announced by cp-1 (L2)")
	}); err != nil {
		t.Errorf("no event says that cp-1 announces the VIP: %v", err)
	}
}

// TestLookAlikeServiceGetsNothing: a LoadBalancer Service in another namespace with the exposure Service's name, labels
// and class draws nothing from the exposure's pool (LB-IPAM reports that no pool matches it, not that the pool is
// full), and the exposure's L2 policy does not select it as Cilium matches Services (with their namespace and name).
func TestLookAlikeServiceGetsNothing(t *testing.T) {
	ctx := context.Background()
	exp, _ := expose(t, "look-alike", header+`"pool":{"cidrs":["203.0.113.208/28"]}}`)
	requireSucceeded(t, exp)
	original := &corev1.Service{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: exp.Namespace, Name: resources.ServiceName(exp.Name)}, original); err != nil {
		t.Fatal(err)
	}
	lookAlike := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: original.Name, Labels: original.Labels},
		Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: original.Spec.LoadBalancerClass,
			Ports: []corev1.ServicePort{{Name: "https", Port: 443, Protocol: corev1.ProtocolTCP}},
		},
	}
	if err := env.Client.Create(ctx, lookAlike); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), lookAlike) })
	var reason string
	if err := testenv.WaitFor(ctx, time.Minute, func(ctx context.Context) (bool, error) {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(lookAlike), lookAlike); err != nil {
			return false, err
		}
		if len(lookAlike.Status.LoadBalancer.Ingress) > 0 {
			return false, fmt.Errorf("the look-alike got %v", lookAlike.Status.LoadBalancer.Ingress)
		}
		for _, c := range lookAlike.Status.Conditions {
			if c.Type == "cilium.io/IPAMRequestSatisfied" && c.Status == metav1.ConditionFalse {
				reason = c.Reason
			}
		}
		return reason != "", nil
	}); err != nil {
		t.Fatal(err)
	}
	if reason != "no_pool" {
		t.Errorf("LB-IPAM says %q about the look-alike, want no_pool: the exposure's pool selected it", reason)
	}

	policies := &ciliumv2alpha1.CiliumL2AnnouncementPolicyList{}
	if err := env.Client.List(ctx, policies, client.MatchingLabels(resources.Labels(exp.Name, exp.Namespace))); err != nil || len(policies.Items) != 1 {
		t.Fatalf("the exposure's L2 policies: %d, %v", len(policies.Items), err)
	}
	selector, err := slimv1.LabelSelectorAsSelector(policies.Items[0].Spec.ServiceSelector)
	if err != nil {
		t.Fatal(err)
	}
	if !selector.Matches(asCiliumSees(original)) || selector.Matches(asCiliumSees(lookAlike)) {
		t.Errorf("the L2 policy's selector %s matches the exposure's Service: %v, the look-alike: %v", selector,
			selector.Matches(asCiliumSees(original)), selector.Matches(asCiliumSees(lookAlike)))
	}
}

// asCiliumSees are a Service's labels as Cilium's service selectors match them: with its namespace and name
// (operator/pkg/lbipam svcLabels, pkg/l2announcer svcAndMetaLabels, pkg/bgp/manager/reconciler serviceLabelSet).
func asCiliumSees(svc *corev1.Service) labels.Set {
	l := labels.Set(maps.Clone(svc.Labels))
	l[resources.SelectorKeyServiceNamespace], l[resources.SelectorKeyServiceName] = svc.Namespace, svc.Name
	return l
}
