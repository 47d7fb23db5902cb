// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

// Package ciliumnodes runs Cilium's real agents, built from the cilium module, on nodes that are network namespaces on
// a bridge, exactly as the pods the webhook admitted would run them, for the datapath suite, the demo and the bench.
//
// Each node has its own network, mount and cgroup namespaces (../shared/notes/datapath.md has why each is needed so
// that an agent changes nothing outside its node): eth0 on the bridge with the node's InternalIP, a fresh bpffs, a
// cgroup2 subtree of its own for socket load-balancing, /proc/sys/kernel read-only, and what kubelet gives the pod
// (test/framework/podrun). "kube-apiserver on each control-plane node" is a proxy at the node's InternalIP:443 and at
// localhost:443 inside it, in front of the test's kube-apiserver, whose certificate is made as Gardener makes it
// (podrun.ShootCertificates). Whatever reaches the `kubernetes` Service's backend address inside a node (where Cilium's
// kube-proxy replacement sends a connection to the ClusterIP) is counted, and so is every packet a node sends to the
// ClusterIP or the VIP untranslated (Attempts).
//
// Kubernetes' own DaemonSet controller and scheduler create and bind the agent pods of the chart stored in the cluster
// (Gardener's, or Options.Stored); the harness is the nodes' kubelet (kubelet.go), the one component that cannot run here.
//
// Cluster holds the nodes, their links and agents (cluster.go, node.go, lan.go, agents.go, kubelet.go, rollout.go,
// snapshot.go) and one kube-apiserver's outage under either announcement (outage.go); the scenarios are cut by concern
// into views of it: L2 (the exposure under L2 and its failover, exposure.go), BGP (the router and the exposure under
// BGP, bgp.go), Reconnects (reconnect.go) and Repins (nodes at new addresses and the pods they lead to, repins.go).
package ciliumnodes

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/flowcontrol"
	"sigs.k8s.io/controller-runtime/pkg/client"

	extensionsv1alpha1 "github.com/gardener/gardener/pkg/apis/extensions/v1alpha1"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/apiserverendpoints"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/cilium"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/bpfobjects"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/fixtures"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/podrun"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/reaper"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/testenv"
)

// ClientIP is the address of the client on the nodes' segment: a host that is no node (a user, a kubelet of another
// cluster, a load test).
const ClientIP = "10.0.3.100"

// Worker is the fixture's worker node: its agent reaches kube-apiserver only over the node network.
const Worker = "worker-0"

// OperatorNode runs the operator: its pod is admitted unscheduled, like every pod of a Deployment.
const OperatorNode = Worker

// NodeNames are the fixture nodes that get a namespace and an agent: the three control-plane nodes and the worker.
var NodeNames = []string{"cp-0", "cp-1", "cp-2", Worker}

// SecondWorker is the fixture node Options.SecondWorker adds.
const SecondWorker = "worker-1"

// Available says why agents cannot run on this machine, or nil when they can.
func Available() error {
	if err := testenv.Root(); err != nil {
		return err
	}
	if err := testenv.KubernetesControllers(); err != nil {
		return err
	}
	if _, err := os.Stat(bpfobjects.Clang); err != nil {
		return fmt.Errorf("the agents compile their BPF programs with %s, which is missing: run `sudo hack/setup.sh`", bpfobjects.Clang)
	}
	return nil
}

// Cluster is the shoot's nodes with their agents, the client and the operator.
type Cluster struct {
	env     *testenv.Env
	lan     *lan
	cgroups string
	objects *bpfobjects.Cache
	// stored is the chart stored through kube-apiserver (Options.Stored).
	stored Chart
	// kubernetes are the DaemonSet controller and the scheduler; stopKubelets ends the nodes' kubelet loop.
	kubernetes   *testenv.Kubernetes
	stopKubelets context.CancelFunc
	kubeletDone  chan struct{}
	// Client is the client's network namespace.
	Client *podrun.Netns
	nodes  map[string]*Node
	// router is the BGP router once started (StartRouter), remote the namespace of the client behind it.
	router *Router
	remote *podrun.Netns

	mu        sync.Mutex
	installed map[Chart]*installation
	// running is what the agents run, nil before Run.
	running *Agents
	// configuredLease are the lease timings of the Shoot's NetworkConfig as last stored, at configuredAt.
	configuredLease *LeaseTimings
	configuredAt    time.Time
	// announced is the exposure providerConfig the Shoot holds since the last Announce ("": the fixtures' own), and
	// configuredFor the one it held when cilium-config was last stored: the webhook completes cilium-config with the
	// lease timings of an L2 exposure only, and only when it admits it.
	announced, configuredFor string
	exposed                  *extensionsv1alpha1.SelfHostedShootExposure
	// operatorPod is the admitted operator pod of operatorChart, whose container runs on OperatorNode; operatorExited
	// is when the nodes' kubelet saw it exit by itself, operatorCrashLoop the back-off of its restarts.
	operatorPod       *corev1.Pod
	operatorChart     Chart
	operatorExited    time.Time
	operatorCrashLoop *flowcontrol.Backoff
	kubeletLog        io.Writer
	// disturbed are the nodes whose agent or kube-apiserver was stopped and started again.
	disturbed map[string]bool
	// webhookRoute takes kube-apiserver's webhook calls to the extension pods (extension.go), routes is its
	// goroutines; extensionStopped says that env's own extension was stopped for the pods.
	webhookRoute     net.Listener
	routes           sync.WaitGroup
	extensionStopped bool
	// extensionArgs are what the extension pods run with beside their chart's arguments; extensionsManaged once the
	// nodes' kubelet looks after their pods (syncExtensionPods); extensionStarts are its starts.
	extensionArgs     []string
	extensionsManaged bool
	extensionStarts   sync.WaitGroup
}

// Options say how New sets the cluster up.
type Options struct {
	// ExtensionPods runs the extension as its chart's pods on the control-plane nodes (extension.go) in place of env's
	// extension on this machine's network, which has no node and hands no L2 lease over.
	ExtensionPods bool
	// Stored is the chart installed through kube-apiserver, whose agent DaemonSet Kubernetes' controllers turn into
	// the pods the nodes' kubelet runs; other charts are admitted as dry runs. Gardener's when empty.
	Stored Chart
	// SecondWorker runs SecondWorker too, for the policy scenario's two workers. Its agent costs a third more CPU in
	// the datapath suite on two cores (docs/development/workload-pods.md), so the suite runs without it.
	SecondWorker bool
	// KubeletLog receives what the nodes' kubelet did (a pod started or deleted, the operator restarted); stdout when
	// nil.
	KubeletLog io.Writer
}

// New plugs a namespace per node of NodeNames and one for the client into a new bridge, and starts each control-plane
// node's kube-apiserver. prefix names what it creates on the machine (namespaces, a cgroup); Close removes it all.
func New(ctx context.Context, env *testenv.Env, prefix string, o Options) (*Cluster, error) {
	// Inside the suite's own cgroup, so that the agents die with it whatever happens to it.
	cgroups, err := reaper.Cgroup("cilium-datapath-" + prefix)
	if err != nil {
		return nil, err
	}
	names := NodeNames
	if o.SecondWorker {
		names = append(slices.Clone(NodeNames), SecondWorker)
	}
	if err := useFixtureAddresses(ctx, env, names); err != nil {
		return nil, err
	}
	c := &Cluster{env: env, cgroups: cgroups, stored: cmp.Or(o.Stored, GardenerChart), kubeletLog: cmp.Or[io.Writer](o.KubeletLog, os.Stdout), nodes: map[string]*Node{}, installed: map[Chart]*installation{}, disturbed: map[string]bool{}, operatorCrashLoop: newCrashLoopBackOff()}
	// The nodes' agents compile for their own node (its addresses and MACs are in the programs): an agent that
	// starts again on it with the same settings gets what it compiled before.
	if c.objects, err = bpfobjects.New(filepath.Join(env.Dir, "bpf-objects")); err != nil {
		return nil, err
	}
	if err := os.Mkdir(c.cgroups, 0o755); err != nil {
		return nil, err
	}
	if c.lan, err = newLAN(prefix); err != nil {
		c.Close()
		return nil, err
	}
	if c.Client, err = c.lan.attach("client", ClientIP); err != nil {
		c.Close()
		return nil, err
	}
	// The VIP is on the segment, as an L2-announced address must be: the client ARPs for it.
	if err := c.Client.IP("route", "add", fixtures.ExposureVIP+"/32", "dev", "eth0"); err != nil {
		c.Close()
		return nil, err
	}
	for i, name := range names {
		n, err := c.newNode(ctx, name, i)
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("node %s: %w", name, err)
		}
		c.nodes[name] = n
	}
	// The DaemonSet controller makes the extension's pods too.
	if err := env.CreateSystemPriorityClass(ctx); err != nil {
		c.Close()
		return nil, err
	}
	if c.kubernetes, err = env.RunKubernetes([]string{"daemonset-controller"}); err != nil {
		c.Close()
		return nil, err
	}
	var kubelets context.Context
	kubelets, c.stopKubelets = context.WithCancel(context.Background())
	c.kubeletDone = make(chan struct{})
	go func() {
		defer close(c.kubeletDone)
		c.runKubelets(kubelets)
	}()
	if o.ExtensionPods {
		if err := c.runExtension(ctx); err != nil {
			c.Close()
			return nil, err
		}
	}
	return c, nil
}

// useFixtureAddresses gives the nodes of names their fixture InternalIPs (a caller may have moved them, as the demo's
// sandbox does) and waits until the extension has published the control-plane nodes' endpoints, which the webhook
// pins.
func useFixtureAddresses(ctx context.Context, env *testenv.Env, names []string) error {
	for name, ip := range fixtures.InternalIPs() {
		if !slices.Contains(names, name) {
			continue
		}
		if err := env.SetInternalIP(ctx, name, ip); err != nil {
			return err
		}
	}
	var want []string
	for _, ip := range fixtures.ControlPlaneIPs {
		want = append(want, apiserverendpoints.URL(ip))
	}
	cm := &corev1.ConfigMap{}
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		err := env.Client.Get(ctx, client.ObjectKey{Namespace: cilium.Namespace, Name: apiserverendpoints.ConfigMapName}, cm)
		return err == nil && cm.Data[apiserverendpoints.KeyAPIServerURLs] == strings.Join(want, ","), client.IgnoreNotFound(err)
	}); err != nil {
		return fmt.Errorf("the extension did not publish the control-plane endpoints %v: %v: %w", want, cm.Data, err)
	}
	return nil
}

// Close stops every process on the nodes and removes the namespaces, links and cgroups; env's extension runs again.
func (c *Cluster) Close() {
	if err := c.stopExtension(); err != nil {
		fmt.Fprintf(os.Stderr, "starting the extension again: %v\n", err)
	}
	// While the nodes' namespaces are there: it gives them their routes back.
	c.BGP().StopRouter()
	if c.stopKubelets != nil {
		c.stopKubelets()
		<-c.kubeletDone
	}
	if c.kubernetes != nil {
		c.kubernetes.Stop()
	}
	var stopping sync.WaitGroup
	for _, n := range c.nodes {
		stopping.Go(n.Stop)
	}
	stopping.Wait()
	for _, n := range c.nodes {
		n.sandbox.Close()
		if err := n.unmountHostFS(); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}
	if c.lan != nil {
		c.lan.close()
	}
	if err := reaper.RemoveCgroups(c.cgroups); err != nil {
		fmt.Fprintf(os.Stderr, "removing %s: %v\n", c.cgroups, err)
	}
	if c.objects != nil {
		compiled, hits, err := c.objects.Counts()
		fmt.Fprintf(os.Stderr, "the agents' BPF objects (%s): %d compiled, %d from the cache (%v)\n", c.objects.Dir(), compiled, hits, err)
	}
}

// Disturbed says whether the node's agent or kube-apiserver was stopped and started again.
func (c *Cluster) Disturbed(name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.disturbed[name]
}

func (c *Cluster) disturb(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.disturbed[name] = true
}

// Node is the node of that name.
func (c *Cluster) Node(name string) *Node { return c.nodes[name] }

// Nodes are the nodes, sorted by name.
func (c *Cluster) Nodes() []*Node {
	out := make([]*Node, 0, len(c.nodes))
	for _, name := range slices.Sorted(maps.Keys(c.nodes)) {
		out = append(out, c.nodes[name])
	}
	return out
}

// Names are the nodes' names, sorted.
func (c *Cluster) Names() []string { return slices.Sorted(maps.Keys(c.nodes)) }

// NodeByIP is the node whose InternalIP is ip, or nil.
func (c *Cluster) NodeByIP(ip string) *Node {
	for _, n := range c.nodes {
		if n.IP == ip {
			return n
		}
	}
	return nil
}

// L2 is the exposure under L2 announcements: the VIP, who holds Cilium's lease and answers ARP, failover and one
// kube-apiserver's outage.
type L2 struct{ *Cluster }

// L2 is the cluster's exposure under L2 announcements.
func (c *Cluster) L2() L2 { return L2{c} }

// BGP is the exposure under BGP: the top-of-rack router, the announcement's settings, draining, withdrawals.
type BGP struct{ *Cluster }

// BGP is the cluster's exposure under BGP.
func (c *Cluster) BGP() BGP { return BGP{c} }

// Reconnects are a worker's agent's connection to kube-apiserver ending, and how it gets over that.
type Reconnects struct{ *Cluster }

// Reconnects are the cluster's reconnect scenarios.
func (c *Cluster) Reconnects() Reconnects { return Reconnects{c} }

// Repins are the control-plane nodes moving to new addresses, and the agents re-pinned to them from their DaemonSet's
// pods.
type Repins struct{ *Cluster }

// Repins are the cluster's moves of nodes and the agent pods they lead to.
func (c *Cluster) Repins() Repins { return Repins{c} }
