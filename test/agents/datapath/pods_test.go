package datapath

import (
	"context"
	"strconv"
	"testing"
	"time"

	ciliumv2 "github.com/cilium/cilium/pkg/k8s/apis/cilium.io/v2"
	"github.com/cilium/cilium/pkg/policy/api"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/ciliumnodes"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/testenv"
)

// TestWorkloadPodsTalkAcrossNodes: pods made as kubelet and containerd make them (their Pod objects, network
// namespaces, Cilium's CNI plugin's ADD) on a control-plane node and a worker get addresses from their nodes' pod CIDRs
// and, once their endpoints carry the identities of their labels, reach each other through Cilium's datapath.
func TestWorkloadPodsTalkAcrossNodes(t *testing.T) {
	onEachLane(t, func(t *testing.T, l *lane) {
		server := startPod(t, l, "cp-0", "app-cp-0", map[string]string{"app": "talk"})
		client := startPod(t, l, "worker-0", "app-worker-0", map[string]string{"app": "talk"})
		serve(t, server)
		if err := dial(client, server, 20*time.Second); err != nil {
			t.Errorf("from %s to %s: %v", client.Pod.Name, server.Pod.Name, err)
		}
	})
}

// TestNetworkPolicyAcrossNodes: a NetworkPolicy that lets one client pod on a worker reach a server pod on the
// control-plane node and not another: both connect before it, and under it the one connects and the other's
// connection is dropped (it times out, nothing refuses it).
func TestNetworkPolicyAcrossNodes(t *testing.T) {
	onEachLane(t, func(t *testing.T, l *lane) {
		ctx := context.Background()
		server := startPod(t, l, "cp-0", "policy-server", map[string]string{"app": "policy-server"})
		allowed := startPod(t, l, "worker-0", "policy-allowed", map[string]string{"role": "allowed"})
		denied := startPod(t, l, "worker-0", "policy-denied", map[string]string{"role": "denied"})
		serve(t, server)
		// Without the policy both connect: what the policy drops, it drops.
		for _, client := range []*ciliumnodes.WorkloadPod{allowed, denied} {
			if err := dial(client, server, 20*time.Second); err != nil {
				t.Fatalf("before the policy, from %s: %v", client.Pod.Name, err)
			}
		}
		policy := &networkingv1.NetworkPolicy{
			ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: "policy-server"},
			Spec: networkingv1.NetworkPolicySpec{
				PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "policy-server"}},
				PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
				Ingress: []networkingv1.NetworkPolicyIngressRule{{
					From:  []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"role": "allowed"}}}},
					Ports: []networkingv1.NetworkPolicyPort{{Port: new(intstr.FromInt32(servePort))}},
				}},
			},
		}
		if err := l.env.Client.Create(ctx, policy); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.env.Client.Delete(context.Background(), policy) })
		var allowedErr, deniedErr error
		if err := testenv.WaitFor(ctx, time.Minute, func(context.Context) (bool, error) {
			allowedErr, deniedErr = dial(allowed, server, 2*time.Second), dial(denied, server, 2*time.Second)
			return allowedErr == nil && dropped(deniedErr), nil
		}); err != nil {
			t.Errorf("under the policy: %s: %v, want connected; %s: %v, want dropped", allowed.Pod.Name, allowedErr, denied.Pod.Name, deniedErr)
		}
	})
}

// TestCiliumNetworkPolicyAcrossNodes: the mirror of TestNetworkPolicyAcrossNodes with Cilium's own policy: a
// CiliumNetworkPolicy lets a client pod on one control-plane node reach a server pod on the worker and not a client on
// another; both connect before it, and under it the one connects and the other's connection is dropped.
func TestCiliumNetworkPolicyAcrossNodes(t *testing.T) {
	onEachLane(t, func(t *testing.T, l *lane) {
		ctx := context.Background()
		server := startPod(t, l, "worker-0", "cnp-server", map[string]string{"app": "cnp-server"})
		allowed := startPod(t, l, "cp-0", "cnp-allowed", map[string]string{"role": "cnp-allowed"})
		denied := startPod(t, l, "cp-1", "cnp-denied", map[string]string{"role": "cnp-denied"})
		serve(t, server)
		for _, client := range []*ciliumnodes.WorkloadPod{allowed, denied} {
			if err := dial(client, server, 20*time.Second); err != nil {
				t.Fatalf("before the policy, from %s: %v", client.Pod.Name, err)
			}
		}
		policy := &ciliumv2.CiliumNetworkPolicy{
			ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: "cnp-server"},
			Spec: &api.Rule{
				EndpointSelector: api.NewESFromMatchRequirements(map[string]string{"app": "cnp-server"}, nil),
				Ingress: []api.IngressRule{{
					IngressCommonRule: api.IngressCommonRule{
						FromEndpoints: []api.EndpointSelector{api.NewESFromMatchRequirements(map[string]string{"role": "cnp-allowed"}, nil)},
					},
					ToPorts: api.PortRules{{Ports: []api.PortProtocol{{Port: strconv.Itoa(servePort), Protocol: api.ProtoTCP}}}},
				}},
			},
		}
		if err := l.env.Client.Create(ctx, policy); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.env.Client.Delete(context.Background(), policy) })
		var allowedErr, deniedErr error
		if err := testenv.WaitFor(ctx, time.Minute, func(context.Context) (bool, error) {
			allowedErr, deniedErr = dial(allowed, server, 2*time.Second), dial(denied, server, 2*time.Second)
			return allowedErr == nil && dropped(deniedErr), nil
		}); err != nil {
			t.Errorf("under the policy: %s: %v, want connected; %s: %v, want dropped", allowed.Pod.Name, allowedErr, denied.Pod.Name, deniedErr)
		}
	})
}

// servePort is where a pod's server listens.
const servePort = ciliumnodes.PolicyPort

// startPod starts a pod named name with labels on node, stopped when the test ends, and waits until its endpoint
// carries the identity of its labels.
func startPod(t *testing.T, l *lane, node, name string, labels map[string]string) *ciliumnodes.WorkloadPod {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: name, Labels: labels},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}}},
	}
	p, err := l.cluster.Node(node).StartPod(context.Background(), l.env, pod)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Stop(context.Background(), l.env); err != nil {
			t.Error(err)
		}
	})
	t.Logf("pod %s on %s at %s", name, node, p.IP)
	if err := l.cluster.WaitForIdentity(context.Background(), p, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	return p
}

// serve answers on the pod's address and servePort until the test ends.
func serve(t *testing.T, p *ciliumnodes.WorkloadPod) {
	t.Helper()
	stop, err := p.Serve(servePort)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
}

// dial connects from one pod to another's server and reads its answer, within timeout.
func dial(from, to *ciliumnodes.WorkloadPod, timeout time.Duration) error {
	return from.Dial(to, servePort, timeout)
}

// dropped says whether err is a connection dropped on its way.
func dropped(err error) bool { return ciliumnodes.Dropped(err) }
