// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package ciliumnodes

import (
	"context"
	"fmt"
	"maps"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/apiserverendpoints"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/cilium"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/ciliumchart"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/podrun"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/testenv"
)

// The baseline: Cilium as networking-cilium's chart renders it, without the extension (issue 44,
// docs/development/workload-pods.md). Its agents reach kube-apiserver through the `kubernetes` ClusterIP, which their
// own kube-proxy replacement translates in connect() (socket load-balancing) to the address kube-apiserver advertises
// in its EndpointSlice: the control-plane node's, served there (ServeAdvertised, testenv.Env.Advertise).

// BaselineControlPlane is the control-plane node whose address kube-apiserver advertises in the baseline: Gardener
// allows one per self-hosted shoot.
const BaselineControlPlane = "cp-0"

// Baseline is the cluster running the baseline on some of its nodes: kube-apiserver advertising
// BaselineControlPlane's address, which that node serves, and the agents of Nodes as networking-cilium's chart renders
// them, connected through the ClusterIP; the other nodes' agents as the webhook admitted them.
type Baseline struct {
	// Advertised is the address in the `kubernetes` EndpointSlice: the control-plane node's, at kube-apiserver's port.
	Advertised string
	// Nodes run their agents without the extension.
	Nodes []string
	c     *Cluster
	ip    string
}

// StartBaseline starts the baseline on nodes and returns once each of their agents is connected through the
// ClusterIP, the positive control: a baseline that never worked shows nothing. Stop ends it, also when StartBaseline
// failed.
func (c *Cluster) StartBaseline(ctx context.Context, nodes []string) (*Baseline, error) {
	controlPlane := c.Node(BaselineControlPlane)
	b := &Baseline{c: c, ip: controlPlane.IP, Nodes: nodes}
	var err error
	if b.Advertised, err = controlPlane.ServeAdvertised(); err != nil {
		return b, err
	}
	if err := c.advertise(ctx, controlPlane.IP); err != nil {
		return b, err
	}
	if _, err := c.Run(ctx, Agents{Chart: GardenerChart, Baseline: nodes}); err != nil {
		return b, err
	}
	for _, name := range nodes {
		n := c.Node(name)
		if err := testenv.WaitFor(ctx, 2*time.Minute, func(context.Context) (bool, error) { return n.ThroughClusterIP(ctx, b.Advertised), nil }); err != nil {
			peers, _ := n.AgentPeers()
			backends, _ := n.Backends(ctx, podrun.ClusterIP, 443)
			return b, fmt.Errorf("positive control: the baseline agent on %s is connected to %v, its load balancer sends the ClusterIP to %v; want %s", n.Name, peers, backends, b.Advertised)
		}
	}
	return b, nil
}

// Stop makes kube-apiserver advertise testenv.AdvertiseAddress again, which nothing serves, and runs the baseline
// nodes' agents as the webhook admits them.
func (b *Baseline) Stop(ctx context.Context) error {
	if err := b.c.advertise(ctx, testenv.AdvertiseAddress); err != nil {
		return err
	}
	_, err := b.c.Run(ctx, Agents{Chart: GardenerChart})
	return err
}

// ReachedFrom counts, by source address, the connections that reached the advertised address: where the ClusterIP
// leads. A node with the extension's agent is never among them.
func (b *Baseline) ReachedFrom() map[string]int {
	ep, ok := b.c.Node(BaselineControlPlane).sandbox.Endpoint(b.Advertised)
	if !ok {
		return nil
	}
	return ep.From()
}

// advertise makes kube-apiserver advertise ip (testenv.Env.Advertise) and restarts kube-controller-manager and
// kube-scheduler after it (RestartKubernetes).
func (c *Cluster) advertise(ctx context.Context, ip string) error {
	if err := c.env.Advertise(ctx, ip); err != nil {
		return err
	}
	return c.RestartKubernetes()
}

// Recovery is what recovered after a restart without the extension, each with the time from kube-apiserver healthy.
type Recovery struct {
	// Reconnected are the nodes whose agents are connected through the ClusterIP again.
	Reconnected map[string]time.Duration
	// Enforcing are the nodes that enforce the policy turned around after the restart and reach the new pod.
	Enforcing map[string]time.Duration
	// Identified are the pods started after the restart whose endpoints got the identity of their labels.
	Identified map[string]time.Duration
}

// Restart restarts kube-apiserver the way r says under s, turns s's policy around once kube-apiserver advertises the
// control-plane node again, and watches for window what recovers: each agent's connection through the ClusterIP, each
// node's enforcement of the turned-around policy, each new pod's identity. It returns that and what broke the policy
// during the outage (Through).
func (b *Baseline) Restart(ctx context.Context, s *PolicyScenario, r APIServerRestart, window time.Duration) (Recovery, []string, error) {
	conv, rec, err := b.RestartBeside(ctx, r, nil, s, 0, window)
	return rec, conv.Violations, err
}

// RestartBeside restarts kube-apiserver once under two scenarios: with, on nodes whose agents the extension pinned,
// and without, on the baseline's nodes. It turns both around once kube-apiserver advertises the control-plane node
// again, waits up to timeout until every node of with converges (PolicyScenario.Restart) and watches without for
// window (Restart). with may be nil; Convergence.Violations are both scenarios'.
func (b *Baseline) RestartBeside(ctx context.Context, r APIServerRestart, with, without *PolicyScenario, timeout, window time.Duration) (Convergence, Recovery, error) {
	scenarios := slices.DeleteFunc([]*PolicyScenario{with, without}, func(s *PolicyScenario) bool { return s == nil })
	healthy, violations, err := Through(func() error { return b.c.RestartAPIServer(r) }, scenarios...)
	conv := Convergence{Violations: violations, Healthy: healthy, Enforced: map[string]time.Duration{}}
	if err != nil {
		return conv, Recovery{}, err
	}
	// kube-apiserver is back in its own Service: what the agents miss is theirs to see.
	if err := b.c.env.WaitForAdvertised(ctx, b.ip); err != nil {
		return conv, Recovery{}, fmt.Errorf("kube-apiserver did not advertise %s again: %w", b.ip, err)
	}
	for _, s := range scenarios {
		if err := s.TurnAround(ctx); err != nil {
			return conv, Recovery{}, err
		}
	}
	var (
		rec       Recovery
		recovered sync.WaitGroup
	)
	recovered.Go(func() { rec = b.waitForRecovery(ctx, without, healthy, window) })
	if with != nil {
		conv.Enforced, err = with.converge(ctx, healthy, timeout)
	}
	recovered.Wait()
	return conv, rec, err
}

// waitForRecovery watches for window what recovers after a restart.
func (b *Baseline) waitForRecovery(ctx context.Context, s *PolicyScenario, healthy time.Time, window time.Duration) Recovery {
	rec := Recovery{Reconnected: map[string]time.Duration{}, Enforcing: map[string]time.Duration{}, Identified: map[string]time.Duration{}}
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	record := func(m map[string]time.Duration, key string, at time.Time) {
		mu.Lock()
		defer mu.Unlock()
		m[key] = at.Sub(healthy)
	}
	for _, name := range b.Nodes {
		n := b.c.Node(name)
		wg.Go(func() {
			if testenv.WaitFor(ctx, window, func(context.Context) (bool, error) { return n.ThroughClusterIP(ctx, b.Advertised), nil }) == nil {
				record(rec.Reconnected, n.Name, time.Now())
			}
		})
	}
	for _, f := range s.Flows {
		wg.Go(func() {
			if b.c.WaitForIdentity(ctx, f.New, window) == nil {
				record(rec.Identified, f.New.Pod.Name, time.Now())
			}
		})
		wg.Go(func() {
			if at, err := f.EnforcedAfterTurn(ctx, window); err == nil {
				record(rec.Enforcing, f.Node, at)
			}
		})
	}
	wg.Wait()
	return rec
}

// startBaseline starts the node's agent from the chart's pod as rendered, with the identity of the stored pod (its
// name, UID and node, to which the harness binds its token). A restarted agent reaches the ClusterIP through the
// socket load-balancing its previous run left (bpffs and /var/run/cilium outlive the agent, docs/datapath.md): when
// the running agent's load balancer sends the ClusterIP to the address kube-apiserver advertises, the new one starts
// on it at once. Otherwise nothing would translate the ClusterIP (a fresh node, or a baseline agent that lost the
// backend), and the agent starts as an operator brings a cluster up: first against the control-plane node's
// kube-apiserver by a name its certificate holds, until its programs are attached and its load balancer holds the
// `kubernetes` Service; then again, on the ClusterIP, with the datapath in place.
func (c *Cluster) startBaseline(ctx context.Context, n *Node, inst *installation, stored *corev1.Pod, configMaps map[string]map[string]string) error {
	pod := ciliumchart.DaemonSetPod(inst.rendered, n.Name)
	pod.ObjectMeta = *stored.ObjectMeta.DeepCopy()
	pod.Spec.NodeName = stored.Spec.NodeName
	configMaps = maps.Clone(configMaps)
	configMaps[cilium.ConfigMapName] = inst.config.Data
	controlPlane := c.Node(BaselineControlPlane)
	advertised, err := controlPlane.ServeAdvertised()
	if err != nil {
		return err
	}
	// The running agent follows the `kubernetes` EndpointSlice within seconds when it is connected.
	if testenv.WaitFor(ctx, 10*time.Second, func(context.Context) (bool, error) { return n.clusterIPLeadsTo(ctx, advertised), nil }) == nil {
		return n.restart(ctx, c.env, pod, configMaps)
	}
	if err := n.restart(ctx, c.env, bootstrapPod(pod, controlPlane.IP), configMaps); err != nil {
		return fmt.Errorf("bootstrapping the baseline agent of %s: %w", n.Name, err)
	}
	if err := n.WaitUntilReady(ctx); err != nil {
		return err
	}
	if err := n.WaitUntilAttached(ctx); err != nil {
		return err
	}
	return n.restart(ctx, c.env, pod, configMaps)
}

// bootstrapPod is pod with its containers pointed at the kube-apiserver of the control-plane node at ip, under the
// name its certificate holds for that (apiserverendpoints.ServerName, resolved by the pod's hosts file).
func bootstrapPod(pod *corev1.Pod, ip string) *corev1.Pod {
	pod = pod.DeepCopy()
	pod.Spec.HostAliases = append(pod.Spec.HostAliases, corev1.HostAlias{IP: ip, Hostnames: []string{apiserverendpoints.ServerName}})
	for _, containers := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range containers {
			containers[i].Env = append(containers[i].Env,
				corev1.EnvVar{Name: "KUBERNETES_SERVICE_HOST", Value: apiserverendpoints.ServerName},
				corev1.EnvVar{Name: "KUBERNETES_SERVICE_PORT", Value: "443"})
		}
	}
	return pod
}

// ServeAdvertised makes the node's kube-apiserver serve on its own address at the port of kube-apiserver's secure
// endpoint, which the `kubernetes` EndpointSlice names once kube-apiserver advertises the node's address.
func (n *Node) ServeAdvertised() (string, error) {
	u, err := url.Parse("https://" + n.apiServer)
	if err != nil {
		return "", err
	}
	addr := net.JoinHostPort(n.IP, u.Port())
	return addr, n.sandbox.Serve(addr, n.apiServer)
}

// AgentPeers are the remote addresses of the agent's established TCP connections, whatever their port.
func (n *Node) AgentPeers() ([]string, error) {
	n.mu.Lock()
	agent := n.agent
	n.mu.Unlock()
	if agent == nil {
		return nil, fmt.Errorf("no agent runs on %s", n.Name)
	}
	return agent.Peers()
}

// ThroughClusterIP says whether the node's agent is connected to advertised, its load balancer sending the
// `kubernetes` ClusterIP there.
func (n *Node) ThroughClusterIP(ctx context.Context, advertised string) bool {
	peers, err := n.AgentPeers()
	return err == nil && slices.Contains(peers, advertised) && n.clusterIPLeadsTo(ctx, advertised)
}

// clusterIPLeadsTo says whether the node's agent's load balancer sends the `kubernetes` ClusterIP to backend.
func (n *Node) clusterIPLeadsTo(ctx context.Context, backend string) bool {
	backends, err := n.Backends(ctx, podrun.ClusterIP, 443)
	return err == nil && slices.ContainsFunc(backends, func(b string) bool { return strings.HasPrefix(b, backend+" ") })
}
