package datapath

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/ciliumnodes"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/testenv"
)

// restartNodes are the nodes whose pods the restart cases watch: the control-plane node, whose kube-apiserver
// restarts, and a worker; each runs a server under the policy and two clients of the other node's server.
var restartNodes = []string{"cp-0", "worker-0"}

// TestPolicyThroughAPIServerRestart: the failure this project exists for (issue 44). Workload pods under a
// NetworkPolicy on the control-plane node and a worker, and the one kube-apiserver restarts: gracefully, as kubelet
// restarts a static pod whose manifest changed (SIGTERM: kube-apiserver takes its address out of the `kubernetes`
// Service first), on Gardener's lane with networking-cilium's chart as real shoots get it; killed with a minute's
// outage (its address stays), on the newest line's lane, so that the lanes take about as long. Throughout, what the
// policy allows connects and what it denies is dropped, on every node; right after kube-apiserver is back, the policy
// is turned around and a new pod starts on each node, and every node enforces the new policy and reaches the new pods
// (the time from kube-apiserver healthy to enforced is logged per node); every agent is back on its own connection
// (localhost on the control-plane nodes, a control-plane node's address elsewhere) and no node dialled the ClusterIP
// or the VIP.
func TestPolicyThroughAPIServerRestart(t *testing.T) {
	restarts := map[*lane]func(*testenv.Env) error{
		gardenerLane: func(e *testenv.Env) error { return e.RestartAPIServer(10 * time.Second) },
		newestLane:   func(e *testenv.Env) error { return e.KillAPIServer(time.Minute) },
	}
	onEachLane(t, func(t *testing.T, l *lane) {
		agentPods, err := l.cluster.Run(context.Background(), ciliumnodes.Agents{Chart: l.line})
		if err != nil {
			t.Fatal(err)
		}
		policyThroughRestart(t, l, restarts[l])
		for _, n := range l.cluster.Nodes() {
			assertConnections(t, l.cluster, n, agentPods[n.Name])
		}
	})
}

// restartFlow is, per node, its server and the clients on the other node that the policy allows (a) and denies (b).
type restartFlow struct {
	node       string
	server     *ciliumnodes.WorkloadPod
	a, b, newB *ciliumnodes.WorkloadPod
}

func policyThroughRestart(t *testing.T, l *lane, restart func(*testenv.Env) error) {
	s := startRestartScenario(t, l)
	healthy, violations, err := s.through(l, restart)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range violations {
		t.Errorf("during the restart: %s", v)
	}
	s.turnAround(t, l, startPod)
	var wg sync.WaitGroup
	for _, f := range s.flows {
		wg.Go(func() {
			if err := f.enforcedAfterTurn(context.Background(), 3*time.Minute); err != nil {
				t.Errorf("after the restart: %v", err)
				return
			}
			t.Logf("%s enforces the turned-around policy and reaches the new pod %s after kube-apiserver was healthy", f.node, time.Since(healthy).Round(100*time.Millisecond))
		})
	}
	wg.Wait()
}

// restartScenario is the restart cases' pods and policy.
type restartScenario struct {
	flows  []*restartFlow
	policy *networkingv1.NetworkPolicy
}

// startRestartScenario starts a server on each of restartNodes and two clients of it on the other, and the policy
// that lets only the first client in; it returns once every node enforces it.
func startRestartScenario(t *testing.T, l *lane) *restartScenario {
	t.Helper()
	ctx := context.Background()
	s := &restartScenario{}
	for _, node := range restartNodes {
		f := &restartFlow{node: node, server: startPod(t, l, node, "restart-server-"+node, map[string]string{"app": "restart-server"})}
		serve(t, f.server)
		s.flows = append(s.flows, f)
	}
	for i, f := range s.flows {
		other := restartNodes[(i+1)%len(restartNodes)]
		f.a = startPod(t, l, other, "restart-a-"+other, map[string]string{"role": "restart-a"})
		f.b = startPod(t, l, other, "restart-b-"+other, map[string]string{"role": "restart-b"})
	}
	s.policy = &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: "restart-server"},
		Spec:       restartPolicy("restart-a"),
	}
	if err := l.env.Client.Create(ctx, s.policy); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.env.Client.Delete(context.Background(), s.policy) })
	for _, f := range s.flows {
		if err := waitEnforced(ctx, f, f.a, f.b, 3*time.Minute); err != nil {
			t.Fatalf("before the restart: %v", err)
		}
	}
	return s
}

// through restarts kube-apiserver while checking the policy on every flow, and returns when kube-apiserver was
// healthy again and what broke the policy meanwhile.
func (s *restartScenario) through(l *lane, restart func(*testenv.Env) error) (time.Time, []string, error) {
	watching, stopWatching := context.WithCancel(context.Background())
	violations := watchPolicy(watching, s.flows)
	err := restart(l.env)
	healthy := time.Now()
	stopWatching()
	return healthy, violations(), err
}

// turnAround lets the denied clients in and keeps the allowed ones out, and starts a new pod of the now allowed role
// on each node: with start, startPod or startPodOnly.
func (s *restartScenario) turnAround(t *testing.T, l *lane, start func(t *testing.T, l *lane, node, name string, labels map[string]string) *ciliumnodes.WorkloadPod) {
	t.Helper()
	ctx := context.Background()
	if err := retry.OnError(retry.DefaultBackoff, func(error) bool { return true }, func() error {
		if err := l.env.Client.Get(ctx, client.ObjectKeyFromObject(s.policy), s.policy); err != nil {
			return err
		}
		s.policy.Spec = restartPolicy("restart-b")
		return l.env.Client.Update(ctx, s.policy)
	}); err != nil {
		t.Fatalf("turning the policy around after the restart: %v", err)
	}
	for i, f := range s.flows {
		other := restartNodes[(i+1)%len(restartNodes)]
		f.newB = start(t, l, other, "restart-new-"+other, map[string]string{"role": "restart-b"})
	}
}

// enforcedAfterTurn waits until f's node enforces the turned-around policy and its server answers the new pod.
func (f *restartFlow) enforcedAfterTurn(ctx context.Context, timeout time.Duration) error {
	if err := waitEnforced(ctx, f, f.b, f.a, timeout); err != nil {
		return err
	}
	if err := testenv.WaitFor(ctx, timeout, func(context.Context) (bool, error) {
		return dial(f.newB, f.server, 2*time.Second) == nil, nil
	}); err != nil {
		return fmt.Errorf("the new pod %s does not reach %s: %w", f.newB.Pod.Name, f.server.Pod.Name, err)
	}
	return nil
}

// restartPolicy lets the pods of role reach the servers' port, and nothing else.
func restartPolicy(role string) networkingv1.NetworkPolicySpec {
	return networkingv1.NetworkPolicySpec{
		PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "restart-server"}},
		PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
		Ingress: []networkingv1.NetworkPolicyIngressRule{{
			From:  []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"role": role}}}},
			Ports: []networkingv1.NetworkPolicyPort{{Port: new(intstr.FromInt32(servePort))}},
		}},
	}
}

// waitEnforced waits up to timeout until allowed reaches f's server and denied's connection is dropped.
func waitEnforced(ctx context.Context, f *restartFlow, allowed, denied *ciliumnodes.WorkloadPod, timeout time.Duration) error {
	var allowedErr, deniedErr error
	if err := testenv.WaitFor(ctx, timeout, func(context.Context) (bool, error) {
		allowedErr, deniedErr = dial(allowed, f.server, 2*time.Second), dial(denied, f.server, 2*time.Second)
		return allowedErr == nil && dropped(deniedErr), nil
	}); err != nil {
		return fmt.Errorf("to %s: %s: %v, want connected; %s: %v, want dropped", f.server.Pod.Name, allowed.Pod.Name, allowedErr, denied.Pod.Name, deniedErr)
	}
	return nil
}

// watchPolicy checks every flow again and again until ctx ends: a connects, b is dropped. It returns what broke that.
func watchPolicy(ctx context.Context, flows []*restartFlow) func() []string {
	var (
		mu         sync.Mutex
		violations []string
		done       sync.WaitGroup
	)
	started := time.Now()
	for _, f := range flows {
		done.Go(func() {
			for ctx.Err() == nil {
				aErr, bErr := dial(f.a, f.server, 3*time.Second), dial(f.b, f.server, 3*time.Second)
				if ctx.Err() != nil {
					return
				}
				at := time.Since(started).Round(100 * time.Millisecond)
				mu.Lock()
				if aErr != nil {
					violations = append(violations, fmt.Sprintf("%s to %s failed after %s: %v", f.a.Pod.Name, f.server.Pod.Name, at, aErr))
				}
				if !dropped(bErr) {
					violations = append(violations, fmt.Sprintf("%s to %s was not dropped after %s: %v", f.b.Pod.Name, f.server.Pod.Name, at, bErr))
				}
				mu.Unlock()
			}
		})
	}
	return func() []string {
		done.Wait()
		mu.Lock()
		defer mu.Unlock()
		return violations
	}
}
