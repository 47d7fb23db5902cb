package ciliumnodes

import (
	"context"
	"fmt"
	"maps"
	"net"
	"net/url"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/apiserverendpoints"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/cilium"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/ciliumchart"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/podrun"
)

// The baseline: Cilium as networking-cilium's chart renders it, without the extension (issue 44,
// docs/development/workload-pods.md). Its agents reach kube-apiserver through the `kubernetes` ClusterIP, which their
// own kube-proxy replacement translates in connect() (socket load-balancing) to the address kube-apiserver advertises
// in its EndpointSlice: the control-plane node's, served there (ServeAdvertised, testenv.Env.Advertise).

// BaselineControlPlane is the control-plane node whose address kube-apiserver advertises in the baseline: Gardener
// allows one per self-hosted shoot.
const BaselineControlPlane = "cp-0"

// startBaseline starts the node's agent from the chart's pod as rendered, with the identity of the stored pod (its
// name, UID and node, to which the harness binds its token). On a node without Cilium's programs nothing translates
// the ClusterIP, so the agent starts as an operator brings a cluster up: first against the control-plane node's
// kube-apiserver by a name its certificate holds, until its programs are attached and its load balancer holds the
// `kubernetes` Service; then again, on the ClusterIP, with the datapath in place (bpffs and /var/run/cilium outlive
// the agent, docs/datapath.md).
func (c *Cluster) startBaseline(ctx context.Context, n *Node, inst *installation, stored *corev1.Pod, configMaps map[string]map[string]string) error {
	pod := ciliumchart.DaemonSetPod(inst.rendered, n.Name)
	pod.ObjectMeta = *stored.ObjectMeta.DeepCopy()
	pod.Spec.NodeName = stored.Spec.NodeName
	configMaps = maps.Clone(configMaps)
	configMaps[cilium.ConfigMapName] = inst.config.Data
	if err := n.restart(ctx, c.env, bootstrapPod(pod, c.Node(BaselineControlPlane).IP), configMaps); err != nil {
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
	if err != nil || !slices.Contains(peers, advertised) {
		return false
	}
	backends, err := n.Backends(ctx, podrun.ClusterIP, 443)
	return err == nil && slices.ContainsFunc(backends, func(b string) bool { return strings.HasPrefix(b, advertised+" ") })
}
