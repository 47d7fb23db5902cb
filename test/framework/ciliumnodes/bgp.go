// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package ciliumnodes

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	ciliumv2 "github.com/cilium/cilium/pkg/k8s/apis/cilium.io/v2"
	gardencorev1beta1 "github.com/gardener/gardener/pkg/apis/core/v1beta1"
	extensionsv1alpha1 "github.com/gardener/gardener/pkg/apis/extensions/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/fixtures"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/frr"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/podrun"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/repo"
)

// The top-of-rack router of the BGP cases: tor-a of docs/bgp.md and example/shoot-gardenadm-bgp.yaml, on the nodes'
// segment, with a client network behind it that is neither the nodes' nor this machine's.
const (
	RouterIP  = "10.0.0.1"
	RouterASN = 64500
	// NodesASN is the exposure's bgp.localASN.
	NodesASN = 64512
	// RemoteNetwork is the network behind the router, RemoteClientIP the client in it.
	RemoteNetwork  = "172.30.0.0/24"
	RemoteClientIP = "172.30.0.2"
	routerRemoteIP = "172.30.0.1"
)

// ExposureConfigBGP is the exposure's providerConfig that advertises fixtures.ExposureVIP to the router, with the
// exposure's defaults for the peer.
var ExposureConfigBGP = ExposureConfigBGPWith(BGPSettings{})

// DrainLabel is the label of docs/bgp.md's drain: a control-plane node that has it is no longer selected to peer.
const DrainLabel = "example.com/bgp-drain"

// BGPSettings are what a test sets of the exposure's BGP configuration; zero values leave the exposure's defaults.
type BGPSettings struct {
	// HoldTime and KeepAlive are the peer's timers in seconds.
	HoldTime, KeepAlive int
	// GracefulRestart, when set, turns the peer's graceful restart on with this restart time in seconds.
	GracefulRestart int
	// Drainable selects the control-plane nodes without DrainLabel, as docs/bgp.md's drain does.
	Drainable bool
}

// ExposureConfigBGPWith is ExposureConfigBGP with the settings p.
func ExposureConfigBGPWith(p BGPSettings) string {
	selector := ""
	if p.Drainable {
		selector = `,"nodeSelector":{"matchExpressions":[{"key":"node-role.kubernetes.io/control-plane","operator":"Exists"},` +
			`{"key":"` + DrainLabel + `","operator":"DoesNotExist"}]}`
	}
	peer := ""
	if p.HoldTime > 0 {
		peer += `,"holdTimeSeconds":` + strconv.Itoa(p.HoldTime)
	}
	if p.KeepAlive > 0 {
		peer += `,"keepAliveTimeSeconds":` + strconv.Itoa(p.KeepAlive)
	}
	if p.GracefulRestart > 0 {
		peer += `,"gracefulRestart":{"enabled":true,"restartTimeSeconds":` + strconv.Itoa(p.GracefulRestart) + `}`
	}
	return `{"apiVersion":"cilium-selfhosted.extensions.gardener.cloud/v1alpha1","kind":"ExposureConfig",` +
		`"announcement":"BGP","pool":{"cidrs":["203.0.113.0/28"]},"loadBalancerIPs":["` + fixtures.ExposureVIP + `"],` +
		`"bgp":{"localASN":` + strconv.Itoa(NodesASN) + `,"peers":[{"name":"tor-a","address":"` + RouterIP + `","asn":` +
		strconv.Itoa(RouterASN) + peer + `}]` + selector + `}}`
}

// Router is the BGP router on the nodes' segment and the client behind it.
type Router struct {
	*frr.Router
	// Remote is the client's network namespace behind the router.
	Remote *podrun.Netns
	ns     *podrun.Netns
	// sourcePort is the last source port a connection from Remote used: each gets one of its own, none of them in
	// TIME_WAIT from an earlier one.
	sourcePort atomic.Int32
	// hops says where the router sent each connection.
	hops *hopCapture
}

// NextSourcePort is a source port for a new connection from Remote that no earlier one used lately.
func (r *Router) NextSourcePort() int { return 40000 + int(r.sourcePort.Add(1)%20000) }

// StartRouter plugs the router into the nodes' segment with the client network behind it, gives every node a route
// to that network (Cilium imports no BGP route) and to the VIP through it, and runs FRR with the configuration docs/bgp.md gives
// operators, verbatim. Close stops it; so does StopRouter.
func (c BGP) StartRouter(ctx context.Context) (*Router, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.router != nil {
		return c.router, nil
	}
	conf, err := routerConfig()
	if err != nil {
		return nil, err
	}
	r := &Router{}
	if r.ns, err = c.lan.attach("tor-a", RouterIP); err != nil {
		return nil, err
	}
	if r.Remote, err = podrun.NewNetns(c.lan.prefix + "-remote"); err != nil {
		return nil, err
	}
	c.remote = r.Remote
	for _, step := range []func() error{
		func() error {
			return r.ns.IP("link", "add", "eth1", "type", "veth", "peer", "name", "eth0", "netns", r.Remote.Name())
		},
		func() error { return r.ns.IP("addr", "add", routerRemoteIP+"/24", "dev", "eth1") },
		func() error { return r.ns.IP("link", "set", "eth1", "up") },
		func() error { return r.Remote.IP("addr", "add", RemoteClientIP+"/24", "dev", "eth0") },
		func() error { return r.Remote.IP("link", "set", "eth0", "up") },
		func() error { return r.Remote.IP("route", "add", "default", "via", routerRemoteIP) },
		// A router forwards, and spreads flows over the paths of a multipath route by their ports (docs/bgp.md).
		func() error { return sysctl(r.ns, "net.ipv4.ip_forward=1", "net.ipv4.fib_multipath_hash_policy=1") },
	} {
		if err := step(); err != nil {
			return nil, fmt.Errorf("setting the router up: %w", err)
		}
	}
	// The router is the nodes' gateway now: the VIP, which a node's load balancer serves (or its socket load-balancing
	// translates, or the forbidden-address counter rejects when a node dials it), goes there too, as with a default
	// route, rather than being looked up on the segment.
	for _, n := range c.Nodes() {
		for _, dst := range []string{RemoteNetwork, fixtures.ExposureVIP + "/32"} {
			if err := n.route(dst, "via", RouterIP); err != nil {
				return nil, fmt.Errorf("the route of %s to %s: %w", n.Name, dst, err)
			}
		}
	}
	nodeByMAC := map[string]string{}
	for _, n := range c.Nodes() {
		mac, err := n.MAC()
		if err != nil {
			return nil, err
		}
		nodeByMAC[mac] = n.Address()
	}
	if r.hops, err = startHopCapture(r.ns, nodeByMAC); err != nil {
		return nil, fmt.Errorf("capturing the router's connections to the VIP: %w", err)
	}
	if r.Router, err = frr.Start(ctx, r.ns, filepath.Join(c.cgroups, "router"), conf); err != nil {
		r.hops.stop()
		return nil, err
	}
	c.router = r
	return r, nil
}

// StopRouter stops the router and its capture and removes the network behind it, so that the tests after a BGP one
// find the segment as they would without it; the nodes keep their routes through it, which lead nowhere then. The
// router's own namespace goes with the segment.
func (c BGP) StopRouter() {
	if c.router == nil {
		return
	}
	c.router.Stop()
	c.router.hops.stop()
	// The nodes as before StartRouter: the VIP on the segment, the remote network unknown, no router on the switch.
	for _, n := range c.Nodes() {
		if err := n.unroute(RemoteNetwork); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
		if err := n.route(fixtures.ExposureVIP+"/32", "dev", "eth0"); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}
	c.lan.detach(c.router.ns)
	c.router = nil
	if c.remote != nil {
		c.remote.Delete()
		c.remote = nil
	}
}

// routerConfig is the FRR configuration of docs/bgp.md (its first `frr` block) with a host name and the log on stdout.
func routerConfig() (string, error) {
	root, err := repo.Root()
	if err != nil {
		return "", err
	}
	doc, err := os.ReadFile(filepath.Join(root, "docs", "bgp.md"))
	if err != nil {
		return "", err
	}
	_, block, ok := strings.Cut(string(doc), "```frr\n")
	if block, _, ok2 := strings.Cut(block, "```"); ok && ok2 {
		return "hostname tor-a\nlog stdout informational\n" + block, nil
	}
	return "", errors.New("docs/bgp.md has no ```frr block")
}

func sysctl(ns *podrun.Netns, settings ...string) error {
	if out, err := ns.Command("sysctl", append([]string{"-q", "-w"}, settings...)...).CombinedOutput(); err != nil {
		return fmt.Errorf("sysctl %v in %s: %w: %s", settings, ns.Name(), err, out)
	}
	return nil
}

// Hop is the control-plane node (its InternalIP) the router forwarded the connection from the remote client's port
// sport to, once that connection was made: "" when the router forwarded none (no route), or a MAC address when it
// went to something else on the segment.
func (r *Router) Hop(ctx context.Context, sport int) string { return r.hops.hop(ctx, sport) }

// WaitForEveryNextHop waits until the router's route to the VIP goes via every control-plane node and no other.
func (r *Router) WaitForEveryNextHop(ctx context.Context) error {
	return r.WaitForNextHops(ctx, fixtures.ControlPlaneIPs)
}

// WaitForNextHops waits until the router's route to the VIP goes via the nodes (their InternalIPs) want and no other.
func (r *Router) WaitForNextHops(ctx context.Context, want []string) error {
	want = slices.Sorted(slices.Values(want))
	var hops []string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		var err error
		hops, err = r.NextHops(fixtures.ExposureVIP)
		slices.Sort(hops)
		return slices.Equal(hops, want), err
	})
	if err != nil {
		neighbors, _ := r.Neighbors(ctx)
		return fmt.Errorf("the router's route to the VIP goes via %v, want %v: %w; neighbours %+v\n%s", hops, want, err, neighbors, r.Log())
	}
	return nil
}

// ServedViaEveryNode sends new connections through the VIP from behind the router until one has worked via each
// control-plane node, for at most a minute, and says how long that took and which failed before: a node advertises
// the VIP before its load balancer may serve it.
func (c BGP) ServedViaEveryNode(ctx context.Context, r *Router) (time.Duration, []string, error) {
	return c.ServedVia(ctx, r, fixtures.ControlPlaneIPs, time.Minute)
}

// ServedVia is ServedViaEveryNode for the nodes (their InternalIPs) via, for at most within.
func (c BGP) ServedVia(ctx context.Context, r *Router, via []string, within time.Duration) (time.Duration, []string, error) {
	start := time.Now()
	served := map[string]bool{}
	var early []string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, within, true, func(ctx context.Context) (bool, error) {
		sport := r.NextSourcePort()
		_, err := c.ReadyzFromRemote(ctx, r, sport)
		hop := r.Hop(ctx, sport)
		if err != nil {
			early = append(early, fmt.Sprintf("%s via %s: %v", time.Since(start).Round(100*time.Millisecond), hop, err))
		} else if slices.Contains(via, hop) {
			served[hop] = true
		}
		return len(served) == len(via), nil
	})
	if err != nil {
		return time.Since(start), early, fmt.Errorf("HTTPS through the VIP from behind the router did not work via each of %v within %s: it did via %v: %w; "+
			"ICMP unreachables the kernels sent: %v; agents %s; failures %v", via, within, served, err, c.UnreachablesSent(), c.L2().AgentViews(context.WithoutCancel(ctx)), early)
	}
	return time.Since(start), early, nil
}

// NodeConfigs describes the CiliumBGPNodeConfigs that Cilium's operator made, with each peer's state as the node's
// agent reports it, and the tail of each control-plane agent's log: what to read when a node does not peer.
func (c BGP) NodeConfigs(ctx context.Context) string {
	list := &ciliumv2.CiliumBGPNodeConfigList{}
	if err := c.env.Client.List(ctx, list); err != nil {
		return err.Error()
	}
	var configs []string
	for _, nc := range list.Items {
		var peers []string
		for _, instance := range nc.Status.BGPInstances {
			for _, p := range instance.PeerStatuses {
				peers = append(peers, fmt.Sprintf("%s %s", p.Name, ptr.Deref(p.PeeringState, "?")))
			}
		}
		configs = append(configs, fmt.Sprintf("%s (created %s): %v", nc.Name, nc.CreationTimestamp.Format("15:04:05"), peers))
	}
	// Cilium's operator selects the nodes of a CiliumBGPClusterConfig by the labels of their CiliumNodes
	// (operator/pkg/bgp/cluster.go upsertNodeConfigs), which each node's own agent copies from its Node
	// (pkg/nodediscovery/nodediscovery.go mutateNodeResource): a label that an agent has not copied yet shows here.
	var labels, logs []string
	for _, n := range c.Nodes() {
		if !n.ControlPlane {
			continue
		}
		cn := &ciliumv2.CiliumNode{}
		if err := c.env.Client.Get(ctx, client.ObjectKey{Name: n.Name}, cn); err != nil {
			labels = append(labels, fmt.Sprintf("%s: %v", n.Name, err))
		} else {
			_, drained := cn.Labels[DrainLabel]
			labels = append(labels, fmt.Sprintf("%s: %s %t", n.Name, DrainLabel, drained))
		}
		state := "running"
		if !n.running() {
			state = "not running"
		}
		logs = append(logs, "--- agent of "+n.Name+" ("+state+") ---\n"+n.LogTail())
	}
	return fmt.Sprintf("CiliumBGPNodeConfigs %v\nCiliumNode labels %v\n%s", configs, labels, strings.Join(logs, "\n"))
}

// Drain labels the node with DrainLabel (drain) or removes the label, as an operator does with docs/bgp.md's drain.
func (c BGP) Drain(ctx context.Context, node string, drain bool) error {
	n := &corev1.Node{}
	if err := c.env.Client.Get(ctx, client.ObjectKey{Name: node}, n); err != nil {
		return err
	}
	patch := client.MergeFrom(n.DeepCopy())
	if drain {
		metav1.SetMetaDataLabel(&n.ObjectMeta, DrainLabel, "true")
	} else {
		delete(n.Labels, DrainLabel)
	}
	return c.env.Client.Patch(ctx, n, patch)
}

// WaitForDrainCopied waits until node's own agent has copied the state of DrainLabel on its Node (drained: present)
// onto its CiliumNode, by whose labels Cilium's operator selects the nodes of a CiliumBGPClusterConfig
// (operator/pkg/bgp/cluster.go upsertNodeConfigs; the agent writes them in pkg/nodediscovery/nodediscovery.go
// mutateNodeResource). After an outage of its kube-apiserver the agent sees the Node's change only once its watch
// is back: client-go's reflector retries a failed watch after 0.8 s doubling to 30 s, with jitter up to twice that,
// and forgets that back-off only after 2 min without a failure (tools/cache/reflector.go defaultBackoff*).
func (c BGP) WaitForDrainCopied(ctx context.Context, node string, drained bool, within time.Duration) error {
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, within, true, func(ctx context.Context) (bool, error) {
		cn := &ciliumv2.CiliumNode{}
		if err := c.env.Client.Get(ctx, client.ObjectKey{Name: node}, cn); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		_, has := cn.Labels[DrainLabel]
		return has == drained, nil
	})
}

// UnreachablesSent counts, per host (the router and each node), the ICMP destination-unreachable messages its kernel
// has sent: where a "no route to host" comes from, when it is the kernel's (Cilium's BPF programs send theirs apart).
func (c BGP) UnreachablesSent() map[string]int {
	count := func(ns string) int {
		out, err := exec.Command("ip", "netns", "exec", ns, "nstat", "-asz", "IcmpOutDestUnreachs").Output()
		if err != nil {
			return -1
		}
		for line := range strings.Lines(string(out)) {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "IcmpOutDestUnreachs" {
				n, _ := strconv.Atoi(f[1])
				return n
			}
		}
		return 0
	}
	sent := map[string]int{}
	if c.router != nil {
		sent["tor-a"] = count(c.router.ns.Name())
	}
	for _, n := range c.Nodes() {
		sent[n.Name] = count(n.sandbox.Name)
	}
	return sent
}

// ReadyzFromRemote sends GET /readyz through the VIP from the client behind the router, from its port sport (0: any),
// verifying kube-apiserver's certificate under the shoot's API name as every client of the VIP does.
func (c BGP) ReadyzFromRemote(ctx context.Context, r *Router, sport int) (string, error) {
	return c.readyzThroughVIP(ctx, r.dialer(sport))
}

// dialer dials from the client behind the router, from its port sport (0: any).
func (r *Router) dialer(sport int) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		var conn net.Conn
		err := r.Remote.Do(func() (err error) {
			d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(RemoteClientIP), Port: sport}}
			conn, err = d.DialContext(ctx, network, addr)
			return err
		})
		return conn, err
	}
}

// Announce sets the exposure's providerConfig in the shoot (as an operator changes the Shoot and gardenlet the
// Cluster), asks for a reconciliation as Gardener does, and waits until the exposure is ready again.
func (c BGP) Announce(ctx context.Context, exp *extensionsv1alpha1.SelfHostedShootExposure, providerConfig string) error {
	if err := c.env.UpdateShoot(ctx, func(shoot *gardencorev1beta1.Shoot) { fixtures.WithExposureConfig(shoot, providerConfig) }); err != nil {
		return err
	}
	c.mu.Lock()
	c.announced = providerConfig
	c.mu.Unlock()
	return c.env.Exposures().ReconcileAndWait(ctx, exp, 3*time.Minute)
}

// agentGracePeriod is how long kubelet lets the agent on node run between SIGTERM and SIGKILL.
func (c *Cluster) agentGracePeriod(node string) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	var pod *corev1.Pod
	if c.running != nil {
		pod = c.installed[c.running.Chart].pods[node]
	}
	return gracePeriod(pod)
}

// BGPFailure is how a control-plane node stops advertising the VIP.
type BGPFailure string

const (
	// NodeLinkDown and NodeHung are the node deaths of the L2 failover (Death).
	NodeLinkDown = BGPFailure(LinkDown)
	NodeHung     = BGPFailure(Hung)
	// AgentKilled: the agent dies at once, the node staying up (its kernel closes the agent's sessions).
	AgentKilled BGPFailure = "agent killed"
	// AgentStopped: the agent is stopped as kubelet stops it, with SIGTERM.
	AgentStopped BGPFailure = "agent stopped (SIGTERM)"
)

// Withdrawal is what one control-plane node's failure did to the router's route to the VIP and to new connections
// through it.
type Withdrawal struct {
	Node    string
	Failure BGPFailure
	// Withdrawn is how long after the failure the router's route to the VIP stopped going via the node (0: not within
	// the window); Others are the other nodes' next hops that left the route meanwhile.
	Withdrawn time.Duration
	Others    []string
	// Attempts and Succeeded count the new connections through the VIP from behind the router, one started every
	// withdrawalAttemptInterval from the failure on; Failures say when each failed one started, the next hop the router
	// picked for it, and how it failed.
	Attempts, Succeeded int
	Failures            []string
}

const (
	// withdrawalAttempts is how many new connections at least go through the VIP while a node fails.
	withdrawalAttempts        = 30
	withdrawalAttemptInterval = 100 * time.Millisecond
)

// FailNode fails the control-plane node name as failure says and watches the router's route to the VIP every 20
// ms until the node is no longer a next hop, for at most window, while new connections go through the VIP from behind
// the router (each with a 2 s timeout, started in parallel). The node stays failed until the next Run.
func (c BGP) FailNode(ctx context.Context, r *Router, name string, failure BGPFailure, window time.Duration) (Withdrawal, error) {
	w := Withdrawal{Node: name, Failure: failure}
	n := c.nodes[name]
	if n == nil || !n.ControlPlane {
		return w, fmt.Errorf("%s is no control-plane node", name)
	}
	before, err := r.NextHops(fixtures.ExposureVIP)
	if err != nil {
		return w, err
	}
	if !slices.Contains(before, n.IP) {
		return w, fmt.Errorf("the router's route to the VIP goes via %v, not via %s's %s", before, name, n.IP)
	}
	c.disturb(name)
	start, err := c.fail(n, failure)
	if err != nil {
		return w, err
	}
	var attempts sync.WaitGroup
	var mu sync.Mutex
	attempt := func() {
		w.Attempts++
		sport := r.NextSourcePort()
		at := time.Since(start)
		attempts.Go(func() {
			actx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			_, err := c.ReadyzFromRemote(actx, r, sport)
			hop := r.Hop(ctx, sport)
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				w.Succeeded++
			} else {
				w.Failures = append(w.Failures, fmt.Sprintf("%s via %s: %v", at.Round(10*time.Millisecond), hop, err))
			}
		})
	}
	lastAttempt := time.Time{}
	err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, window, true, func(context.Context) (bool, error) {
		if time.Since(lastAttempt) >= withdrawalAttemptInterval {
			attempt()
			lastAttempt = time.Now()
		}
		hops, err := r.NextHops(fixtures.ExposureVIP)
		if err != nil {
			return false, err
		}
		for _, ip := range before {
			if ip != n.IP && !slices.Contains(hops, ip) && !slices.Contains(w.Others, ip) {
				w.Others = append(w.Others, ip)
			}
		}
		if w.Withdrawn == 0 && !slices.Contains(hops, n.IP) {
			w.Withdrawn = time.Since(start)
		}
		return w.Withdrawn > 0 && w.Attempts >= withdrawalAttempts, nil
	})
	attempts.Wait()
	slices.Sort(w.Failures)
	if err != nil && !wait.Interrupted(err) {
		return w, err
	}
	return w, nil
}

// fail fails node n as failure says and returns when.
func (c *Cluster) fail(n *Node, failure BGPFailure) (time.Time, error) {
	switch failure {
	case NodeLinkDown, NodeHung:
		return n.die(Death(failure))
	case AgentKilled:
		start := time.Now()
		n.Kill()
		return start, nil
	case AgentStopped:
		// As kubelet stops a container: SIGTERM, SIGKILL after the grace period.
		grace := c.agentGracePeriod(n.Name)
		start := time.Now()
		go func() {
			stopCtx, cancel := context.WithTimeout(context.Background(), grace)
			defer cancel()
			n.stopAgent(stopCtx)
		}()
		return start, nil
	}
	return time.Time{}, fmt.Errorf("unknown failure %q", failure)
}
