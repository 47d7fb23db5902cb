// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package ciliumnodes

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	ciliumv2 "github.com/cilium/cilium/pkg/k8s/apis/cilium.io/v2"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/testenv"
)

// PolicyPort is where a policy scenario's servers listen.
const PolicyPort = 8080

// PolicyScenario is a NetworkPolicy over workload pods on some nodes, for watching it through kube-apiserver's
// restarts (issue 44, docs/development/workload-pods.md): on each node a server under the policy, and on the next node
// two clients of it, one of role NAME-a and one of role NAME-b, the one the policy lets in and the one it keeps out,
// so that every node's policy is checked from another node (with two workers, a worker's from the control-plane node
// and from the other worker). TurnAround swaps the roles, as often as a case restarts. Scenarios of different names
// run side by side.
type PolicyScenario struct {
	Flows  []*PolicyFlow
	name   string
	c      *Cluster
	policy *networkingv1.NetworkPolicy
	pods   []*WorkloadPod
	stops  []func()
	turns  int
	// Logf, when set, is told of every pod started.
	Logf func(format string, args ...any)
}

// PolicyFlow is a server and its clients: Allowed and Denied by the policy now, and New, of Allowed's role, started by
// the last TurnAround.
type PolicyFlow struct {
	Node                         string
	Server, Allowed, Denied, New *WorkloadPod
	c                            *Cluster
}

// ScenarioNodes are the nodes of the policy scenario: the one control-plane node, whose kube-apiserver restarts (Gardener
// allows one per self-hosted shoot), and the workers (Options.SecondWorker).
func (c *Cluster) ScenarioNodes() []string {
	nodes := []string{BaselineControlPlane}
	for _, n := range c.Nodes() {
		if !n.ControlPlane {
			nodes = append(nodes, n.Name)
		}
	}
	return nodes
}

// StartPolicyScenario starts the pods and the policy of the scenario name on nodes and returns once every node
// enforces it. Stop removes them, also when it fails.
func (c *Cluster) StartPolicyScenario(ctx context.Context, name string, nodes []string, logf func(string, ...any)) (*PolicyScenario, error) {
	s := &PolicyScenario{c: c, name: name, Logf: logf}
	for _, node := range nodes {
		server, err := s.startPod(ctx, node, name+"-server-"+node, s.serverLabels(), true)
		if err != nil {
			return s, err
		}
		stop, err := server.Serve(PolicyPort)
		if err != nil {
			return s, err
		}
		s.stops = append(s.stops, stop)
		s.Flows = append(s.Flows, &PolicyFlow{Node: node, Server: server, c: c})
	}
	for i, f := range s.Flows {
		other := nodes[(i+1)%len(nodes)]
		var err error
		if f.Allowed, err = s.startPod(ctx, other, name+"-a-"+other, map[string]string{"role": name + "-a"}, true); err != nil {
			return s, err
		}
		if f.Denied, err = s.startPod(ctx, other, name+"-b-"+other, map[string]string{"role": name + "-b"}, true); err != nil {
			return s, err
		}
	}
	s.policy = &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: name + "-server"},
		Spec:       PolicyAllowing(s.serverLabels(), map[string]string{"role": name + "-a"}),
	}
	if err := c.env.Client.Create(ctx, s.policy); err != nil {
		return s, err
	}
	for _, f := range s.Flows {
		if _, err := WaitEnforced(ctx, f.Server, f.Allowed, f.Denied, 3*time.Minute); err != nil {
			return s, fmt.Errorf("the policy: %w", err)
		}
	}
	return s, nil
}

// serverLabels are the labels of the scenario's servers, which its policy selects.
func (s *PolicyScenario) serverLabels() map[string]string {
	return map[string]string{"app": s.name + "-server"}
}

// Stop deletes the policy and stops the pods.
func (s *PolicyScenario) Stop() {
	ctx := context.Background()
	if s.policy != nil {
		_ = s.c.env.Client.Delete(ctx, s.policy)
	}
	for _, stop := range s.stops {
		stop()
	}
	for _, p := range s.pods {
		if err := p.Stop(ctx, s.c.env); err != nil && s.Logf != nil {
			s.Logf("stopping pod %s: %v", p.Pod.Name, err)
		}
	}
}

// startPod starts a pod named name with labels on node (Cluster.StartWorkloadPod), stopped by Stop.
func (s *PolicyScenario) startPod(ctx context.Context, node, name string, labels map[string]string, identity bool) (*WorkloadPod, error) {
	p, err := s.c.StartWorkloadPod(ctx, node, name, labels, identity)
	if p != nil {
		s.pods = append(s.pods, p)
		if s.Logf != nil {
			s.Logf("pod %s on %s at %s", name, node, p.IP)
		}
	}
	return p, err
}

// Through runs restart while checking every flow of the scenarios again and again (the allowed client connects, the
// denied one is dropped), and returns when kube-apiserver was healthy again and what broke the policy meanwhile.
func Through(restart func() error, scenarios ...*PolicyScenario) (time.Time, []string, error) {
	watching, stopWatching := context.WithCancel(context.Background())
	var flows []*PolicyFlow
	for _, s := range scenarios {
		flows = append(flows, s.Flows...)
	}
	violations := watchPolicy(watching, flows)
	err := restart()
	healthy := time.Now()
	stopWatching()
	return healthy, violations(), err
}

// Convergence is how the scenario came through a restart: what broke the policy during the outage, when
// kube-apiserver was healthy again, and per node the time from then to the turned-around policy enforced and the new
// pod reached.
type Convergence struct {
	Violations []string
	Healthy    time.Time
	Enforced   map[string]time.Duration
}

// Restart restarts kube-apiserver the way r says under the scenario (Through), turns the policy around right after
// and waits up to timeout until every node enforces it and reaches its new pod (EnforcedAfterTurn). It fails with
// every node that did not.
func (s *PolicyScenario) Restart(ctx context.Context, r APIServerRestart, timeout time.Duration) (Convergence, error) {
	healthy, violations, err := Through(func() error { return s.c.RestartAPIServer(r) }, s)
	conv := Convergence{Violations: violations, Healthy: healthy, Enforced: map[string]time.Duration{}}
	if err != nil {
		return conv, err
	}
	if err := s.TurnAround(ctx); err != nil {
		return conv, err
	}
	conv.Enforced, err = s.converge(ctx, healthy, timeout)
	return conv, err
}

// converge waits up to timeout until every node enforces the turned-around policy and reaches its new pod
// (EnforcedAfterTurn), and returns per node the time from healthy to that. It fails with every node that did not.
func (s *PolicyScenario) converge(ctx context.Context, healthy time.Time, timeout time.Duration) (map[string]time.Duration, error) {
	var (
		mu       sync.Mutex
		wg       sync.WaitGroup
		errs     []error
		enforced = map[string]time.Duration{}
	)
	for _, f := range s.Flows {
		wg.Go(func() {
			at, err := f.EnforcedAfterTurn(ctx, timeout)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", f.Node, err))
				return
			}
			enforced[f.Node] = at.Sub(healthy)
		})
	}
	wg.Wait()
	return enforced, errors.Join(errs...)
}

// TurnAround swaps the roles: the denied clients are let in and the allowed ones kept out, and a new pod of the role
// now allowed starts on each client node, not waiting for its identity: how long that takes after a restart is part of
// what EnforcedAfterTurn measures.
func (s *PolicyScenario) TurnAround(ctx context.Context) error {
	s.turns++
	for _, f := range s.Flows {
		f.Allowed, f.Denied = f.Denied, f.Allowed
	}
	role := s.Flows[0].Allowed.Pod.Labels["role"]
	if err := retry.OnError(retry.DefaultBackoff, func(error) bool { return true }, func() error {
		if err := s.c.env.Client.Get(ctx, client.ObjectKeyFromObject(s.policy), s.policy); err != nil {
			return err
		}
		s.policy.Spec = PolicyAllowing(s.serverLabels(), map[string]string{"role": role})
		return s.c.env.Client.Update(ctx, s.policy)
	}); err != nil {
		return fmt.Errorf("turning the policy around: %w", err)
	}
	for _, f := range s.Flows {
		node := f.Allowed.Node.Name
		var err error
		if f.New, err = s.startPod(ctx, node, fmt.Sprintf("%s-new-%d-%s", s.name, s.turns, node), map[string]string{"role": role}, false); err != nil {
			return err
		}
	}
	return nil
}

// EnforcedAfterTurn waits up to timeout until the new pod has its identity, f's node enforces the turned-around policy
// and its server answers the new pod, and returns when the first probe that found the last of them began.
func (f *PolicyFlow) EnforcedAfterTurn(ctx context.Context, timeout time.Duration) (time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := f.c.WaitForIdentity(ctx, f.New, timeout); err != nil {
		return time.Time{}, err
	}
	enforced, err := WaitEnforced(ctx, f.Server, f.Allowed, f.Denied, timeout)
	if err != nil {
		return time.Time{}, err
	}
	var reached time.Time
	if err := testenv.WaitFor(ctx, timeout, func(context.Context) (bool, error) {
		reached = time.Now()
		return f.New.Dial(f.Server, PolicyPort, 2*time.Second) == nil, nil
	}); err != nil {
		return time.Time{}, fmt.Errorf("the new pod %s does not reach %s: %w", f.New.Pod.Name, f.Server.Pod.Name, err)
	}
	if reached.After(enforced) {
		return reached, nil
	}
	return enforced, nil
}

// WaitEnforced waits up to timeout until allowed reaches server's PolicyPort and denied's connection is dropped, and
// returns when the probe that found it began.
func WaitEnforced(ctx context.Context, server, allowed, denied *WorkloadPod, timeout time.Duration) (time.Time, error) {
	var (
		allowedErr, deniedErr error
		at                    time.Time
	)
	if err := testenv.WaitFor(ctx, timeout, func(context.Context) (bool, error) {
		at = time.Now()
		allowedErr, deniedErr = allowed.Dial(server, PolicyPort, 2*time.Second), denied.Dial(server, PolicyPort, 2*time.Second)
		return allowedErr == nil && Dropped(deniedErr), nil
	}); err != nil {
		return time.Time{}, fmt.Errorf("to %s: %s: %v, want connected; %s: %v, want dropped", server.Pod.Name, allowed.Pod.Name, allowedErr, denied.Pod.Name, deniedErr)
	}
	return at, nil
}

// PolicyAllowing lets the pods labelled from reach the pods labelled server at PolicyPort, and nothing else.
func PolicyAllowing(server, from map[string]string) networkingv1.NetworkPolicySpec {
	return networkingv1.NetworkPolicySpec{
		PodSelector: metav1.LabelSelector{MatchLabels: server},
		PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
		Ingress: []networkingv1.NetworkPolicyIngressRule{{
			From:  []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: from}}},
			Ports: []networkingv1.NetworkPolicyPort{{Port: new(intstr.FromInt32(PolicyPort))}},
		}},
	}
}

// watchPolicy checks every flow again and again until ctx ends: A connects, B is dropped. It returns what broke that:
// the denied client connecting at all, the allowed one failing twice in a row (once may be the machine's load).
func watchPolicy(ctx context.Context, flows []*PolicyFlow) func() []string {
	var (
		mu         sync.Mutex
		violations []string
		done       sync.WaitGroup
	)
	started := time.Now()
	for _, f := range flows {
		done.Go(func() {
			var allowedFailed error
			for ctx.Err() == nil {
				allowedErr, deniedErr := f.Allowed.Dial(f.Server, PolicyPort, 3*time.Second), f.Denied.Dial(f.Server, PolicyPort, 3*time.Second)
				if ctx.Err() != nil {
					return
				}
				at := time.Since(started).Round(100 * time.Millisecond)
				mu.Lock()
				if allowedErr != nil && allowedFailed != nil {
					violations = append(violations, fmt.Sprintf("%s to %s failed twice in a row, after %s: %v, %v", f.Allowed.Pod.Name, f.Server.Pod.Name, at, allowedFailed, allowedErr))
				}
				allowedFailed = allowedErr
				if !Dropped(deniedErr) {
					violations = append(violations, fmt.Sprintf("%s to %s was not dropped after %s: %v", f.Denied.Pod.Name, f.Server.Pod.Name, at, deniedErr))
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

// WaitForIdentity waits up to timeout until the pod's CiliumEndpoint carries the security identity of the pod's
// labels, as the agent gives it once it has read the Pod (not reserved:init, which selects nothing a policy names).
func (c *Cluster) WaitForIdentity(ctx context.Context, p *WorkloadPod, timeout time.Duration) error {
	endpoint := &ciliumv2.CiliumEndpoint{}
	if err := testenv.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		if err := c.env.Client.Get(ctx, client.ObjectKeyFromObject(p.Pod), endpoint); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		// The pod's own endpoint, not one of an earlier pod of the same name that an agent did not get to delete.
		if endpoint.Status.Identity == nil || !slices.ContainsFunc(endpoint.OwnerReferences, func(o metav1.OwnerReference) bool { return o.UID == p.Pod.UID }) {
			return false, nil
		}
		for k, v := range p.Pod.Labels {
			if !slices.Contains(endpoint.Status.Identity.Labels, "k8s:"+k+"="+v) {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		return fmt.Errorf("the endpoint of pod %s has no identity of its labels %v: %+v (%w)", p.Pod.Name, p.Pod.Labels, endpoint.Status.Identity, err)
	}
	return nil
}
