// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package ciliumnodes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cilium/cilium/api/v1/models"
	"github.com/cilium/cilium/pkg/defaults"
	"github.com/cilium/cilium/pkg/labels"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/apiserverendpoints"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/cilium"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/bpfobjects"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/ciliumbin"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/ciliumchart"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/fixtures"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/kubelet"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/podrun"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/testenv"
)

// Node is a shoot node: its namespaces, its kube-apiserver (control plane only) and its agent.
type Node struct {
	Name, IP     string
	ControlPlane bool
	sandbox      *podrun.Sandbox
	lan          *lan
	cgroup       string
	// host is where the node keeps what outlives its agent (hostFS).
	host string
	// objects are the BPF objects its agents compiled, shared with the other nodes' (test/framework/bpfobjects).
	objects *bpfobjects.Cache
	// serviceBackend is where Cilium's kube-proxy replacement sends a connection to the `kubernetes` ClusterIP: the
	// endpoint of kube-apiserver's own EndpointSlice. Inside the node it is a trap.
	serviceBackend string
	// apiServer is the test's kube-apiserver, where the node's kube-apiserver address forwards.
	apiServer string

	mu    sync.Mutex
	agent *podrun.Started
	// ended counts the agents that ended by themselves (a crash, a fatal error), found so when the harness came to
	// stop them.
	ended int
	// starts counts the agents the harness started on the node.
	starts   int
	operator *podrun.Started
	// extension is the extension's process on a control-plane node, from the pod extensionPod, running in
	// extensionCgroup; extensionStarting while it is being started.
	extension         *podrun.Started
	extensionPod      types.UID
	extensionCgroup   string
	extensionStarting bool
	// extensionReady is extension once it was reported ready.
	extensionReady *podrun.Started
	// apiServerDown: the node's kube-apiserver was switched off with its link (LinkDown).
	apiServerDown bool
	// apiServerOff: the node's kube-apiserver is switched off (SwitchAPIServer), for whatever reason.
	apiServerOff bool
	// webhookCalls are the test kube-apiserver's connections the harness routed to the node's extension pod, standing
	// for the node's own kube-apiserver's calls (routeWebhooks).
	webhookCalls map[net.Conn]struct{}
	// agentPod is the UID of the pod the agent runs.
	agentPod types.UID
	// cniImage is the image whose CNI plugin the node has: the last agent's, whose install-cni-binaries init container
	// copies it into the host's /opt/cni/bin, where it stays.
	cniImage string
	// silenced: the node's switch port forwards nothing (Hung).
	silenced bool
	// moved: the node's address changed under its running agent, which the next Run starts afresh.
	moved bool
	// routes are the node's static routes (`ip route replace` arguments) in netns, which come back with its link.
	routes [][]string
	netns  *podrun.Netns
}

// route adds a static route of the node (`ip route replace` with args, the destination first), which its network
// configuration adds again whenever its link comes up: the kernel drops the routes over a link that goes down, and
// takes none over a link that is down (the route is then only recorded).
func (n *Node) route(args ...string) error {
	up, err := n.linkUp()
	if err != nil {
		return err
	}
	if up {
		if err := n.netns.IP(append([]string{"route", "replace"}, args...)...); err != nil {
			return err
		}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.routes = slices.DeleteFunc(n.routes, func(r []string) bool { return r[0] == args[0] })
	n.routes = append(n.routes, args)
	return nil
}

// unroute deletes the node's static route to dst, which its link then no longer brings back.
func (n *Node) unroute(dst string) error {
	n.mu.Lock()
	n.routes = slices.DeleteFunc(n.routes, func(r []string) bool { return r[0] == dst })
	n.mu.Unlock()
	up, err := n.linkUp()
	if err != nil || !up {
		return err
	}
	if out, err := n.netns.Command("ip", "route", "del", dst).CombinedOutput(); err != nil && !strings.Contains(string(out), "No such process") {
		return fmt.Errorf("deleting the route of %s to %s: %w: %s", n.Name, dst, err, out)
	}
	return nil
}

// agentFlags are the settings a node here cannot take from the chart: its device, tunnel routing (no routes between
// the nodes' pod CIDRs), no health checking, Hubble or L7 proxy (no kubelet, no Envoy), and /proc for the
// chart's /host/proc (a hostPath of the node's /proc: here the agent's own /proc is the node's, since /proc/sys/net
// follows the reader's network namespace and /proc/sys/kernel is read-only). Everything else, kube-proxy replacement
// and L2 announcements included, comes from cilium-config as the chart renders it; the CNI configuration too, written
// into the node's own /etc/cni/net.d (hostCNIConfDir), where the harness's workload pods read it (pods.go).
var agentFlags = []string{
	"--procfs=/proc",
	"--devices=eth0", "--routing-mode=tunnel", "--tunnel-protocol=vxlan", "--ipam=kubernetes", "--enable-ipv6=false",
	"--enable-health-checking=false", "--enable-endpoint-health-checking=false",
	"--enable-hubble=false", "--enable-l7-proxy=false", "--external-envoy-proxy=false", "--prometheus-serve-addr=",
}

// healthPort is the agent's health API port in Gardener's chart (global.agent.healthPort), probed by kubelet inside
// the node's network namespace.
const healthPort = "9879"

func (c *Cluster) newNode(ctx context.Context, name string, index int) (*Node, error) {
	obj := &corev1.Node{}
	if err := c.env.Client.Get(ctx, client.ObjectKey{Name: name}, obj); err != nil {
		return nil, err
	}
	n := &Node{Name: name, ControlPlane: apiserverendpoints.IsControlPlaneNode(obj), lan: c.lan, objects: c.objects}
	for _, a := range obj.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			n.IP = a.Address
		}
	}
	// ipam=kubernetes takes the node's pod CIDR from the Node, as kube-controller-manager would have set it.
	obj.Spec.PodCIDR = fmt.Sprintf("10.200.%d.0/24", index)
	obj.Spec.PodCIDRs = []string{obj.Spec.PodCIDR}
	// Its kubelet runs (below), so that the DaemonSet controller and the scheduler place the agent's pod on it.
	kubelet.SetLabels(obj)
	if err := c.env.Client.Update(ctx, obj); err != nil {
		return nil, err
	}
	kubelet.ReportReady(&obj.Status)
	if err := c.env.Client.Status().Update(ctx, obj); err != nil {
		return nil, err
	}

	ns, err := c.lan.attach(name, n.IP)
	if err != nil {
		return nil, err
	}
	apiServer, err := url.Parse(c.env.Config.Host)
	if err != nil {
		return nil, err
	}
	slice := &discoveryv1.EndpointSlice{}
	if err := c.env.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: "kubernetes"}, slice); err != nil {
		return nil, err
	}
	if len(slice.Endpoints) == 0 || len(slice.Endpoints[0].Addresses) == 0 || len(slice.Ports) == 0 {
		return nil, fmt.Errorf("the kubernetes EndpointSlice has no endpoint: %+v", slice)
	}
	n.serviceBackend = fmt.Sprintf("%s:%d", slice.Endpoints[0].Addresses[0], *slice.Ports[0].Port)
	n.apiServer = apiServer.Host
	if err := ns.IP("addr", "add", slice.Endpoints[0].Addresses[0]+"/32", "dev", "lo"); err != nil {
		return nil, err
	}
	n.netns = ns
	if err := countAttempts(ns, n.route); err != nil {
		return nil, err
	}
	addresses := map[string]string{n.serviceBackend: ""}
	if n.ControlPlane {
		addresses[n.IP+":443"] = apiServer.Host
		addresses[podrun.LocalAPIServer] = apiServer.Host
	}
	if n.sandbox, err = podrun.Attach(ns, podrun.Network{
		Name: ns.Name(), APIServer: apiServer.Host, ControlPlaneIPs: fixtures.ControlPlaneIPs,
		ClusterIP: podrun.ClusterIP, VIP: fixtures.ExposureVIP, ExternalName: ciliumchart.ExternalHost,
	}, addresses); err != nil {
		return nil, err
	}
	if n.host, err = hostFS(filepath.Join(c.env.Dir, "nodes", name, "host")); err != nil {
		return nil, err
	}
	n.cgroup = filepath.Join(c.cgroups, name)
	return n, os.Mkdir(n.cgroup, 0o755)
}

// The node's own filesystem below host that its agent's pod mounts as host paths: a bpffs of the node's (the chart's
// bpf-maps volume, /sys/fs/bpf), where the agent pins its maps and the links of its programs, and /var/run/cilium
// (cilium-run), the state it restores at start. Because they outlive the agent, a node keeps its datapath across an
// agent restart as a real node does: its programs stay attached to eth0, its connection tracking and NAT entries
// and the L2 responder's entries stay, until the next agent replaces them.
const (
	hostBPFFS      = "bpffs"
	hostCiliumRun  = "run-cilium"
	bpffsMountPath = "/sys/fs/bpf"
	ciliumRunPath  = "/run/cilium"
)

// bpfSourcesPath is where the agent's container sees the module's BPF sources, to copy them where the image has them.
const bpfSourcesPath = "/run/cilium-bpf-sources"

// bpfObjectsPath is where the agent's container sees the cache of BPF objects, whose clang it runs.
const bpfObjectsPath = "/run/bpf-objects"

// hostFS creates the node's filesystem at dir and mounts its bpffs, which unmountHostFS undoes.
func hostFS(dir string) (string, error) {
	for _, d := range []string{hostBPFFS, hostCiliumRun, hostCNIConfDir} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			return "", err
		}
	}
	if err := unix.Mount("bpf", filepath.Join(dir, hostBPFFS), "bpf", 0, ""); err != nil {
		return "", fmt.Errorf("mounting the node's bpffs at %s: %w", filepath.Join(dir, hostBPFFS), err)
	}
	return dir, nil
}

// unmountHostFS unmounts the node's bpffs: with it go the node's pinned maps and programs, once no agent runs.
func (n *Node) unmountHostFS() error {
	if n.host == "" {
		return nil
	}
	if err := unix.Unmount(filepath.Join(n.host, hostBPFFS), unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("unmounting %s's bpffs: %w", n.Name, err)
	}
	return nil
}

// restart stops the node's agent if it runs, as kubelet stops a container it replaces (SIGKILL after the pod's grace
// period), revives the node and starts the agent from pod.
func (n *Node) restart(ctx context.Context, env *testenv.Env, pod *corev1.Pod, configMaps map[string]map[string]string) error {
	stopCtx, cancel := context.WithTimeout(ctx, gracePeriod(pod))
	n.stopAgent(stopCtx)
	cancel()
	if err := n.revive(); err != nil {
		return err
	}
	return n.startAgent(ctx, env, pod, configMaps)
}

// stopAgent stops the node's agent if it runs, as kubelet does: SIGTERM, and SIGKILL once ctx ends (the grace period
// when kubelet stops a deleted pod's containers). It returns the agent's exit code as a container runtime reports it
// (128 + the signal for a killed process).
func (n *Node) stopAgent(ctx context.Context) int32 {
	n.mu.Lock()
	agent := n.agent
	n.countEnded()
	n.agent, n.agentPod, n.moved = nil, "", false
	n.mu.Unlock()
	if agent == nil {
		return 0
	}
	// SIGKILL goes to the whole container, as a runtime kills the container's cgroup: the agent's children (clang
	// compiling its BPF programs) would otherwise keep its output open, and the stop waiting, until they finish.
	// It is written before stopAgent returns: once the grace period ran out, it could otherwise reach the cgroup after
	// the next agent started in it.
	stopped, killed := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(killed)
		select {
		case <-ctx.Done():
			_ = os.WriteFile(filepath.Join(n.cgroup, "cgroup.kill"), []byte("1"), 0o644)
		case <-stopped:
		}
	}()
	agent.Stop(ctx)
	close(stopped)
	<-killed
	return exitCode(agent.Err())
}

// exitCode is a process's exit code as a container runtime reports it (128 + the signal for a killed process).
func exitCode(err error) int32 {
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &exit) && exit.ExitCode() >= 0:
		return int32(exit.ExitCode())
	default:
		return 128 + int32(syscall.SIGKILL)
	}
}

// Address is the node's InternalIP, for readers beside the goroutine that moves it.
func (n *Node) Address() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.IP
}

// runs says whether the node's agent runs the pod of that UID.
func (n *Node) runs(pod types.UID) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.agent != nil && n.agentPod == pod
}

// stale says whether the node's address changed under its running agent.
func (n *Node) stale() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.moved
}

// move gives the node the address ip in place of its current one, as a DHCP client does when its lease moved (the old
// address released, the new one bound) or a node rebuilt at a new address: whatever was connected to the old address
// is left with a black hole. A control-plane node's kube-apiserver serves on the new address.
func (n *Node) move(ip string) error {
	// In this order: deleting a subnet's primary address deletes its secondaries with it.
	if err := n.sandbox.IP("addr", "del", n.IP+prefixLen, "dev", "eth0"); err != nil {
		return err
	}
	if err := n.sandbox.IP("addr", "add", ip+prefixLen, "dev", "eth0"); err != nil {
		return err
	}
	if n.ControlPlane {
		if err := n.sandbox.Serve(ip+":443", n.apiServer); err != nil {
			return err
		}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.IP, n.moved = ip, n.agent != nil
	return nil
}

// countEnded counts the node's agent if it ended by itself; with n.mu held, before the harness takes it.
func (n *Node) countEnded() {
	if n.agentEnded() {
		n.ended++
	}
}

// exits is how many of the node's agents ended by themselves, the running one included.
func (n *Node) exits() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.agentEnded() {
		return n.ended + 1
	}
	return n.ended
}

// agentEnded says whether the node's current agent has ended without the harness stopping it; with n.mu held.
func (n *Node) agentEnded() bool {
	if n.agent == nil {
		return false
	}
	select {
	case <-n.agent.Stopped():
		return true
	default:
		return false
	}
}

// running says whether an agent runs on the node.
func (n *Node) running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.agent != nil && !n.agentEnded()
}

// startAgent runs the cilium-agent container of pod on the node.
func (n *Node) startAgent(ctx context.Context, env *testenv.Env, pod *corev1.Pod, configMaps map[string]map[string]string) error {
	// The BPF sources of the agent's own version: the agent compiles them and fills their configuration in.
	i := slices.IndexFunc(pod.Spec.Containers, func(c corev1.Container) bool { return c.Name == cilium.AgentContainerName })
	if i < 0 {
		return fmt.Errorf("pod %s has no container %s", pod.Name, cilium.AgentContainerName)
	}
	agent, err := ciliumbin.PathFor(ciliumbin.Agent, pod.Spec.Containers[i].Image)
	if err != nil {
		return err
	}
	version, err := ciliumbin.Version(agent)
	if err != nil {
		return err
	}
	module, err := testenv.ModuleDir(ciliumchart.Module(version))
	if err != nil {
		return err
	}
	dir := filepath.Join(env.Dir, "nodes", n.Name)
	if err := n.runInitContainers(ctx, env, pod, configMaps, dir); err != nil {
		return err
	}
	c, err := podrun.ForPod(ctx, env, pod, cilium.AgentContainerName)
	if err != nil {
		return err
	}
	c.Node, c.ConfigMaps, c.Args, c.Tools, c.Cgroup = n.Name, configMaps, agentFlags, map[string]string{"clang": filepath.Join(bpfObjectsPath, bpfobjects.Compiler)}, n.cgroup
	// The module's BPF sources are bound before the container's /tmp and /var/lib are hidden, since the module cache
	// may lie below either (GOMODCACHE=/tmp/..., as some CI runners set it); so is the object cache.
	c.HostPaths = map[string]string{
		bpffsMountPath: filepath.Join(n.host, hostBPFFS), ciliumRunPath: filepath.Join(n.host, hostCiliumRun),
		cniConfMountPath: filepath.Join(n.host, hostCNIConfDir),
		bpfSourcesPath:   filepath.Join(module, "bpf"), bpfObjectsPath: n.objects.Dir(),
	}
	c.Setup = []string{
		// What the image and the chart's init containers give the agent, per node, beside its host paths: the node's
		// cgroup2 subtree (the cgroup namespace's root) where socket load-balancing attaches, the BPF sources where
		// the image has them, and kernel-wide sysctls it must not change.
		"mkdir -p /run/cilium/cgroupv2", "mount -t cgroup2 none /run/cilium/cgroupv2",
		// The agent writes the kernel's feature headers into its BPF sources.
		"mkdir -p /var/lib/cilium", "cp -r " + bpfSourcesPath + " /var/lib/cilium/bpf", "chmod -R u+w /var/lib/cilium/bpf",
		"mount --bind /proc/sys/kernel /proc/sys/kernel", "mount -o remount,bind,ro /proc/sys/kernel",
	}
	c.Dir, c.LogPath = filepath.Join(dir, "pod"), filepath.Join(dir, "cilium-agent.log")
	started, err := n.sandbox.Start(c)
	if err != nil {
		return err
	}
	n.mu.Lock()
	n.agent, n.agentPod, n.cniImage = started, pod.UID, pod.Spec.Containers[i].Image
	n.starts++
	n.mu.Unlock()
	return nil
}

// runInitContainers runs the pod's init containers that run a Cilium binary, in order and each to its end, as
// kubelet does before the agent starts: upstream's chart builds the agent's configuration directory so (`cilium-dbg
// build-config`, which reads cilium-config and CiliumNodeConfigs from kube-apiserver). The others prepare the node
// (mounts, sysctls, CNI binaries), which the agent's Setup does here.
func (n *Node) runInitContainers(ctx context.Context, env *testenv.Env, pod *corev1.Pod, configMaps map[string]map[string]string, dir string) error {
	for _, ic := range pod.Spec.InitContainers {
		if _, ok := ciliumbin.ForContainer(ic); !ok {
			continue
		}
		c, err := podrun.ForPod(ctx, env, pod, ic.Name)
		if err != nil {
			return err
		}
		// In the node's cgroup, as every process of a real node is below the cgroup2 root where socket load-balancing
		// attaches: a container of the chart that dials the ClusterIP has it translated.
		c.Node, c.ConfigMaps, c.Dir, c.LogPath, c.Cgroup = n.Name, configMaps, filepath.Join(dir, "pod"), filepath.Join(dir, ic.Name+".log"), n.cgroup
		started, err := n.sandbox.Start(c)
		if err != nil {
			return err
		}
		select {
		case <-started.Stopped():
		case <-time.After(time.Minute):
			started.Kill()
			return fmt.Errorf("init container %s did not finish within a minute:\n%s", ic.Name, started.LogTail(20))
		}
		if err := started.Err(); err != nil {
			return fmt.Errorf("init container %s: %w\n%s", ic.Name, err, started.LogTail(20))
		}
	}
	return nil
}

// Ready probes the agent as kubelet's readiness probe in Cilium's charts does: GET /healthz with `brief: true` on
// 127.0.0.1:<healthPort> inside the node. An agent that has exited is an error.
func (n *Node) Ready(ctx context.Context) (bool, error) {
	n.mu.Lock()
	agent := n.agent
	n.mu.Unlock()
	if agent == nil {
		return false, fmt.Errorf("no agent runs on %s", n.Name)
	}
	select {
	case <-agent.Stopped():
		return false, fmt.Errorf("the agent on %s stopped: %v\n%s", n.Name, agent.Err(), agent.LogTail(30))
	default:
	}
	c := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DialContext: n.sandbox.DialContext}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1:"+healthPort+"/healthz", nil)
	if err != nil {
		return false, err
	}
	req.Header.Set("brief", "true")
	resp, err := c.Do(req)
	if err != nil {
		return false, nil
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK, nil
}

// WaitUntilReady waits until the agent passes its readiness probe.
func (n *Node) WaitUntilReady(ctx context.Context) error {
	if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 5*time.Minute, true, n.Ready); err != nil {
		return fmt.Errorf("the agent on %s did not become ready: %w\n%s", n.Name, err, n.LogTail())
	}
	return nil
}

// WaitUntilAttached waits until the agent has attached its own programs to its node's devices: until its host
// endpoint is ready, whose regeneration compiles bpf_host and attaches it to cilium_host and the node's devices
// (pkg/datapath/loader reloadHostEndpoint). An agent reports ready, takes L2 leases and advertises the VIP over BGP
// before that (compiling takes seconds per agent, more when several compile at once on two cores). On a node that
// never ran an agent, nothing load-balances meanwhile: the node routes what it receives for the VIP. On a node whose
// agent restarted, the last agent's programs serve until the new one replaces them, and with them the maps it
// changed between releases.
func (n *Node) WaitUntilAttached(ctx context.Context) error {
	hostLabel := labels.LabelHost[labels.IDNameHost]
	host := url.QueryEscape(hostLabel.String())
	var state models.EndpointState
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		var endpoints []*models.Endpoint
		// Until the agent serves its API and has created its host endpoint, the request fails: not yet.
		if err := n.agentGet(ctx, "/v1/endpoint?labels="+host, &endpoints); err != nil || len(endpoints) != 1 ||
			endpoints[0].Status == nil || endpoints[0].Status.State == nil {
			return false, nil
		}
		state = *endpoints[0].Status.State
		return state == models.EndpointStateReady, nil
	}); err != nil {
		return fmt.Errorf("the host endpoint of the agent on %s is not ready (%q): %w\n%s", n.Name, state, err, n.LogTail())
	}
	return nil
}

// Status is the agent's own status, as `cilium-dbg status` shows it.
func (n *Node) Status(ctx context.Context) (*models.StatusResponse, error) {
	status := &models.StatusResponse{}
	return status, n.agentGet(ctx, "/v1/healthz", status)
}

// Backends are the backends the agent's load balancer holds for the frontend ip:port, each as "address:port state",
// as `cilium-dbg service list` shows them.
func (n *Node) Backends(ctx context.Context, ip string, port uint16) ([]string, error) {
	var services []*models.Service
	if err := n.agentGet(ctx, "/v1/service", &services); err != nil {
		return nil, err
	}
	var backends []string
	for _, s := range services {
		if s.Spec == nil || s.Spec.FrontendAddress == nil || s.Spec.FrontendAddress.IP != ip || s.Spec.FrontendAddress.Port != port {
			continue
		}
		for _, b := range s.Spec.BackendAddresses {
			backends = append(backends, fmt.Sprintf("%s:%d %s", ptr.Deref(b.IP, ""), b.Port, b.State))
		}
	}
	return backends, nil
}

// agentGet reads path from the agent's API into v, on its socket, which lies in the agent's mount namespace
// (/var/run/cilium/cilium.sock, /run being a tmpfs of the node's), reached through /proc/<pid>/root.
func (n *Node) agentGet(ctx context.Context, path string, v any) error {
	n.mu.Lock()
	agent := n.agent
	n.mu.Unlock()
	if agent == nil {
		return fmt.Errorf("no agent runs on %s", n.Name)
	}
	// /var/run is an absolute symlink to /run, which the kernel would resolve from this process's root, not the agent's.
	socket := filepath.Join("/proc", strconv.Itoa(agent.Pid()), "root", strings.TrimPrefix(defaults.SockPath, "/var"))
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", socket)
	}}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://agent"+path, nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("the agent's API answered %s to GET %s", resp.Status, path)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// Stop ends the node's Cilium processes as kubelet does: SIGTERM, and SIGKILL after the charts' grace period (1 s, which
// kubelet makes its minimum of 2 s; the operator, whose chart leaves Kubernetes' 30 s, exits well within it). Cilium
// 1.19's agent from Gardener's chart does not exit within 30 s here once stopped: its log ends with Hubble's certificate
// loader waiting for the certificate that networking-cilium's hubble-generate-certs Job would have made.
func (n *Node) Stop() {
	n.end(func(p *podrun.Started) {
		ctx, cancel := context.WithTimeout(context.Background(), minimumGracePeriod)
		defer cancel()
		p.Stop(ctx)
	})
}

// Kill ends the node's Cilium processes at once, their children included, as when the node dies. The node's datapath
// stays (hostFS).
func (n *Node) Kill() {
	// Taken from the node first: the nodes' kubelet restarts an operator that exits while it is still the node's.
	processes := n.take()
	_ = os.WriteFile(filepath.Join(n.cgroup, "cgroup.kill"), []byte("1"), 0o644)
	for _, p := range processes {
		p.Kill()
	}
}

func (n *Node) end(how func(*podrun.Started)) {
	for _, p := range n.take() {
		how(p)
	}
}

// take takes the node's Cilium processes from it.
func (n *Node) take() []*podrun.Started {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.countEnded()
	var processes []*podrun.Started
	for _, p := range []*podrun.Started{n.agent, n.operator} {
		if p != nil {
			processes = append(processes, p)
		}
	}
	n.agent, n.operator, n.agentPod = nil, nil, ""
	return processes
}

// AgentLog is what the node's running agent has logged so far.
func (n *Node) AgentLog() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.agent == nil {
		return ""
	}
	return n.agent.Log()
}

// LogTail is the end of the agent's log.
func (n *Node) LogTail() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.agent == nil {
		return ""
	}
	return n.agent.LogTail(40)
}

// APIServerPeers are the kube-apiserver addresses (port 443) the agent is connected to, by the address pairs of its
// own sockets: after socket load-balancing, the backend it reached.
func (n *Node) APIServerPeers() ([]string, error) {
	all, err := n.AgentPeers()
	// Port 443: every kube-apiserver address (the control-plane nodes, localhost, the ClusterIP, the VIP); the
	// others are the probes and clients of the agent's own servers.
	return slices.DeleteFunc(all, func(p string) bool { return !strings.HasSuffix(p, ":443") }), err
}

// ServiceBackendHits counts the connections that reached the `kubernetes` Service's backend inside the node: where a
// connection to the ClusterIP leads once the agent's socket load-balancing translates it.
func (n *Node) ServiceBackendHits() int {
	ep, _ := n.sandbox.Endpoint(n.serviceBackend)
	return ep.Count()
}

// SwitchAPIServer stops or starts the node's kube-apiserver (InternalIP:443 and localhost:443), the node staying up.
func (n *Node) SwitchAPIServer(on bool) error {
	for _, a := range []string{n.IP + ":443", podrun.LocalAPIServer} {
		if !on {
			n.sandbox.SwitchOff(a)
		} else if err := n.sandbox.SwitchOn(a); err != nil {
			return err
		}
	}
	n.mu.Lock()
	n.apiServerOff = !on
	n.mu.Unlock()
	if !on {
		n.endWebhookCalls()
	}
	return nil
}

// die kills the node as death says, its agent without a chance to hand anything over, and returns when it died: the
// moment its link went down or its switch port stopped forwarding. Its agent is killed after that, so that nothing it
// sends as it ends (the FIN of a BGP session) leaves the node.
//
// A node whose link is down keeps running, but its kube-apiserver reaches no etcd quorum and answers nobody, its own
// extension pod included: here it is switched off. A hung node runs nothing: its extension pod is frozen.
func (n *Node) die(death Death) (time.Time, error) {
	start := time.Now()
	switch death {
	case LinkDown:
		if err := n.SetLink(false); err != nil {
			return start, err
		}
	case Hung:
		if err := n.freezeExtension(true); err != nil {
			return start, err
		}
		if err := n.silence(); err != nil {
			return start, err
		}
	}
	n.Kill()
	if death == LinkDown && n.ControlPlane {
		if err := n.SwitchAPIServer(false); err != nil {
			return start, err
		}
		n.mu.Lock()
		n.apiServerDown = true
		n.mu.Unlock()
	}
	return start, nil
}

// silence stops the node's switch port, its link staying up.
func (n *Node) silence() error {
	if err := n.lan.setPort(n.Name, false); err != nil {
		return err
	}
	n.mu.Lock()
	n.silenced = true
	n.mu.Unlock()
	n.endWebhookCalls()
	return nil
}

// revive undoes what die did: the node answers again, its link is up, its kube-apiserver and extension pod run.
func (n *Node) revive() error {
	n.mu.Lock()
	silenced, apiServerDown := n.silenced, n.apiServerDown
	n.silenced, n.apiServerDown = false, false
	n.mu.Unlock()
	if apiServerDown {
		if err := n.SwitchAPIServer(true); err != nil {
			return err
		}
	}
	if err := n.freezeExtension(false); err != nil {
		return err
	}
	if silenced {
		if err := n.lan.setPort(n.Name, true); err != nil {
			return err
		}
	}
	return n.SetLink(true)
}

// linkUp says whether the node's eth0 is up.
func (n *Node) linkUp() (bool, error) {
	out, err := exec.Command("ip", "-n", n.netns.Name(), "-o", "link", "show", "eth0").Output()
	if err != nil {
		return false, fmt.Errorf("ip link show eth0 in %s: %w", n.netns.Name(), err)
	}
	return strings.Contains(string(out), ",UP") || strings.Contains(string(out), "<UP"), nil
}

// SetLink brings the node's eth0 up or down; up, with its static routes again.
func (n *Node) SetLink(up bool) error {
	state := "down"
	if up {
		state = "up"
	}
	if err := n.netns.IP("link", "set", "eth0", state); err != nil || !up {
		return err
	}
	n.mu.Lock()
	routes := slices.Clone(n.routes)
	n.mu.Unlock()
	for _, r := range routes {
		if err := n.netns.IP(append([]string{"route", "replace"}, r...)...); err != nil {
			return err
		}
	}
	return nil
}

// MAC is the MAC address of the node's eth0.
func (n *Node) MAC() (string, error) {
	out, err := exec.Command("ip", "-n", n.sandbox.Name, "-o", "link", "show", "eth0").Output()
	if err != nil {
		return "", err
	}
	f := strings.Fields(string(out))
	for i, w := range f {
		if w == "link/ether" && i+1 < len(f) {
			return strings.ToLower(f[i+1]), nil
		}
	}
	return "", fmt.Errorf("no MAC in %q", out)
}
