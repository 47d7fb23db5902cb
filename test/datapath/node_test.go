package datapath

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/apiserverendpoints"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/cilium"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/ciliumchart"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/fixtures"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/podrun"
)

// node is a shoot node: its namespaces, its kube-apiserver (control plane only) and its agent.
type node struct {
	name, ip     string
	controlPlane bool
	sandbox      *podrun.Sandbox
	cgroup       string
	// serviceBackend is where Cilium's kube-proxy replacement sends a connection to the `kubernetes` ClusterIP: the
	// endpoint of kube-apiserver's own EndpointSlice. Inside the node it is a trap.
	serviceBackend string

	mu       sync.Mutex
	agent    *podrun.Started
	operator *podrun.Started
}

// agentFlags are the settings a node here cannot take from the chart: its device, tunnel routing (no routes between
// the nodes' pod CIDRs), no CNI, health checking, Hubble or L7 proxy (no kubelet, no pods, no Envoy), and /proc for the
// chart's /host/proc (a hostPath of the node's /proc: here the agent's own /proc is the node's, since /proc/sys/net
// follows the reader's network namespace and /proc/sys/kernel is read-only). Everything else, kube-proxy replacement
// and L2 announcements included, comes from cilium-config as the chart renders it.
var agentFlags = []string{
	"--procfs=/proc",
	"--devices=eth0", "--routing-mode=tunnel", "--tunnel-protocol=vxlan", "--ipam=kubernetes", "--enable-ipv6=false",
	"--enable-health-checking=false", "--enable-endpoint-health-checking=false",
	"--enable-hubble=false", "--enable-l7-proxy=false", "--external-envoy-proxy=false", "--cni-exclusive=false",
	"--write-cni-conf-when-ready=", "--prometheus-serve-addr=",
}

// healthPort is the agent's health API port in Gardener's chart (global.agent.healthPort), probed by kubelet inside
// the node's network namespace.
const healthPort = "9879"

func newNode(ctx context.Context, name string, index int) (*node, error) {
	obj := &corev1.Node{}
	if err := envtest.Client.Get(ctx, client.ObjectKey{Name: name}, obj); err != nil {
		return nil, err
	}
	n := &node{name: name, controlPlane: apiserverendpoints.IsControlPlaneNode(obj)}
	for _, a := range obj.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			n.ip = a.Address
		}
	}
	// ipam=kubernetes takes the node's pod CIDR from the Node, as kube-controller-manager would have set it.
	obj.Spec.PodCIDR = fmt.Sprintf("10.200.%d.0/24", index)
	obj.Spec.PodCIDRs = []string{obj.Spec.PodCIDR}
	if err := envtest.Client.Update(ctx, obj); err != nil {
		return nil, err
	}

	ns, err := network.attach(name, n.ip)
	if err != nil {
		return nil, err
	}
	apiServer, err := url.Parse(envtest.Config.Host)
	if err != nil {
		return nil, err
	}
	slice := &discoveryv1.EndpointSlice{}
	if err := envtest.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: "kubernetes"}, slice); err != nil {
		return nil, err
	}
	if len(slice.Endpoints) == 0 || len(slice.Endpoints[0].Addresses) == 0 || len(slice.Ports) == 0 {
		return nil, fmt.Errorf("the kubernetes EndpointSlice has no endpoint: %+v", slice)
	}
	n.serviceBackend = fmt.Sprintf("%s:%d", slice.Endpoints[0].Addresses[0], *slice.Ports[0].Port)
	if err := ns.IP("addr", "add", slice.Endpoints[0].Addresses[0]+"/32", "dev", "lo"); err != nil {
		return nil, err
	}
	addresses := map[string]string{n.serviceBackend: ""}
	if n.controlPlane {
		addresses[n.ip+":443"] = apiServer.Host
		addresses[podrun.LocalAPIServer] = apiServer.Host
	}
	if n.sandbox, err = podrun.Attach(ns, podrun.Network{
		Name: ns.Name(), APIServer: apiServer.Host, ControlPlaneIPs: fixtures.ControlPlaneIPs,
		ClusterIP: podrun.ClusterIP, VIP: fixtures.ExposureVIP, ExternalName: ciliumchart.ExternalHost,
	}, addresses); err != nil {
		return nil, err
	}
	n.cgroup = filepath.Join(cgroups, name)
	return n, os.Mkdir(n.cgroup, 0o755)
}

// startAgent runs the cilium-agent container of pod on the node.
func (n *node) startAgent(ctx context.Context, pod *corev1.Pod, configMaps map[string]map[string]string) error {
	module, err := ciliumchart.ModuleDir(ciliumchart.GardenerVersion)
	if err != nil {
		return err
	}
	c, err := podrun.ForPod(ctx, envtest.Config, pod, cilium.AgentContainerName)
	if err != nil {
		return err
	}
	dir := filepath.Join(envtest.Dir, "nodes", n.name)
	c.Node, c.ConfigMaps, c.Args, c.Tools, c.Cgroup = n.name, configMaps, agentFlags, map[string]string{"clang": clang}, n.cgroup
	c.Setup = []string{
		// What the image and the chart's init containers give the agent, per node: a bpffs of its own, the node's
		// cgroup2 subtree (the cgroup namespace's root) where socket load-balancing attaches, the BPF sources
		// where the image has them, and kernel-wide sysctls it must not change.
		"mount -t bpf bpf /sys/fs/bpf",
		"mkdir -p /run/cilium/cgroupv2", "mount -t cgroup2 none /run/cilium/cgroupv2",
		// The agent writes the kernel's feature headers into its BPF sources.
		"mkdir -p /var/lib/cilium", "cp -r " + filepath.Join(module, "bpf") + " /var/lib/cilium/", "chmod -R u+w /var/lib/cilium/bpf",
		"mount --bind /proc/sys/kernel /proc/sys/kernel", "mount -o remount,bind,ro /proc/sys/kernel",
	}
	c.Dir, c.LogPath = filepath.Join(dir, "pod"), filepath.Join(dir, "cilium-agent.log")
	started, err := n.sandbox.Start(c)
	if err != nil {
		return err
	}
	n.mu.Lock()
	n.agent = started
	n.mu.Unlock()
	return nil
}

// ready probes the agent as kubelet's readiness probe in Gardener's chart does: GET /healthz with `brief: true` on
// 127.0.0.1:<healthPort> inside the node. An agent that has exited is an error.
func (n *node) ready(ctx context.Context) (bool, error) {
	n.mu.Lock()
	agent := n.agent
	n.mu.Unlock()
	if agent == nil {
		return false, fmt.Errorf("no agent runs on %s", n.name)
	}
	select {
	case <-agent.Stopped():
		return false, fmt.Errorf("the agent on %s stopped: %v\n%s", n.name, agent.Err(), agent.LogTail(30))
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

// stop ends the node's Cilium processes as kubelet does.
func (n *node) stop() { n.end(func(p *podrun.Started) { p.Stop(context.Background()) }) }

// kill ends the node's Cilium processes at once, as when the node dies.
func (n *node) kill() { n.end(func(p *podrun.Started) { p.Kill() }) }

func (n *node) end(how func(*podrun.Started)) {
	n.mu.Lock()
	processes := []*podrun.Started{n.agent, n.operator}
	n.agent, n.operator = nil, nil
	n.mu.Unlock()
	for _, p := range processes {
		if p != nil {
			how(p)
		}
	}
}

// logTail is the end of the agent's log.
func (n *node) logTail() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.agent == nil {
		return ""
	}
	return n.agent.LogTail(40)
}

// kubeSystemConfigMaps are the ConfigMaps of Cilium's namespace by name, for the pods' env and volumes.
func kubeSystemConfigMaps(ctx context.Context) (map[string]map[string]string, error) {
	list := &corev1.ConfigMapList{}
	if err := envtest.Client.List(ctx, list, client.InNamespace(cilium.Namespace)); err != nil {
		return nil, err
	}
	out := map[string]map[string]string{}
	for _, cm := range list.Items {
		out[cm.Name] = cm.Data
	}
	return out, nil
}

var (
	installMu sync.Mutex
	agentPods map[string]*corev1.Pod
)

// startAgents installs Gardener's networking-cilium chart through kube-apiserver, so that the webhook admits it,
// creates the agent pod of every node as the DaemonSet controller would, and starts the agents.
func startAgents(ctx context.Context) (map[string]*corev1.Pod, error) {
	installMu.Lock()
	defer installMu.Unlock()
	if agentPods != nil {
		return agentPods, nil
	}
	rendered, err := ciliumchart.RenderGardener(ciliumchart.GardenerVersion, ciliumchart.GardenerValues(ciliumchart.GardenerVersion))
	if err != nil {
		return nil, err
	}
	for _, obj := range rendered.All {
		if err := envtest.Client.Create(ctx, obj.DeepCopyObject().(client.Object)); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("creating %T %s: %w", obj, obj.GetName(), err)
		}
	}
	agent := rendered.Agent.DeepCopy()
	if err := envtest.Client.Get(ctx, client.ObjectKeyFromObject(agent), agent); err != nil {
		return nil, err
	}
	configMaps, err := kubeSystemConfigMaps(ctx)
	if err != nil {
		return nil, err
	}
	pods := map[string]*corev1.Pod{}
	for _, name := range slices.Sorted(maps.Keys(nodes)) {
		pod := ciliumchart.DaemonSetPod(agent, name)
		if err := envtest.Client.Create(ctx, pod); err != nil {
			return nil, err
		}
		if err := nodes[name].startAgent(ctx, pod, configMaps); err != nil {
			return nil, fmt.Errorf("starting the agent on %s: %w", name, err)
		}
		pods[name] = pod
	}
	agentPods = pods
	return pods, nil
}
