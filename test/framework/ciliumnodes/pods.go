// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package ciliumnodes

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/ciliumbin"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/podrun"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/testenv"
)

// hostCNIConfDir is the node's /etc/cni/net.d, which the agent's pod mounts at cniConfMountPath (Gardener's chart:
// global.cni.hostConfDirMountPath) and where the agent writes its CNI configuration (write-cni-conf-when-ready).
const (
	hostCNIConfDir   = "etc-cni-netd"
	cniConfMountPath = "/host/etc/cni/net.d"
)

// WorkloadPod is a pod on a node, made as kubelet and containerd make one: its Pod object in kube-apiserver, a network
// namespace of its own and Cilium's CNI plugin's ADD for it (docs/development/workload-pods.md).
type WorkloadPod struct {
	Pod         *corev1.Pod
	Node        *Node
	IP          string
	netns       *podrun.Netns
	containerID string
}

// Netns is the pod's network namespace.
func (p *WorkloadPod) Netns() *podrun.Netns { return p.netns }

// StartPod creates pod on the node (its spec.nodeName set), its network namespace, and calls the CNI plugin's ADD for
// it as containerd does (internal/cri/server sandbox_run.go: ifname eth0, CNI_ARGS of toCNILabels with IgnoreUnknown).
func (n *Node) StartPod(ctx context.Context, env *testenv.Env, pod *corev1.Pod) (*WorkloadPod, error) {
	pod.Spec.NodeName = n.Name
	if err := env.Client.Create(ctx, pod); err != nil {
		return nil, err
	}
	p, err := n.addPod(pod)
	if err != nil {
		// Nothing of a pod that did not start stays behind: its object (deleted as kubelet deletes it, so that its
		// name is free again), its namespace.
		_ = env.Client.Delete(ctx, pod, client.GracePeriodSeconds(0), client.Preconditions{UID: &pod.UID})
		return nil, err
	}
	return p, nil
}

// StartWorkloadPod starts a pod named name with labels on node (StartPod) that runs nothing but its sandbox and, with
// identity, waits up to 30 s until its endpoint carries the identity of its labels (WaitForIdentity).
func (c *Cluster) StartWorkloadPod(ctx context.Context, node, name string, labels map[string]string, identity bool) (*WorkloadPod, error) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: name, Labels: labels},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}}},
	}
	p, err := c.Node(node).StartPod(ctx, c.env, pod)
	if err != nil || !identity {
		return p, err
	}
	return p, c.WaitForIdentity(ctx, p, 30*time.Second)
}

// addPod creates the stored pod's network namespace and calls the CNI plugin's ADD for it.
func (n *Node) addPod(pod *corev1.Pod) (*WorkloadPod, error) {
	id := make([]byte, 32)
	if _, err := rand.Read(id); err != nil {
		return nil, err
	}
	p := &WorkloadPod{Pod: pod, Node: n, containerID: hex.EncodeToString(id)}
	ns, err := podrun.NewNetns("cni-" + p.containerID[:12])
	if err != nil {
		return nil, err
	}
	p.netns = ns
	out, err := n.cni(p, "ADD")
	var result struct {
		IPs []struct {
			Address string `json:"address"`
		} `json:"ips"`
	}
	if err == nil {
		if err = json.Unmarshal(out, &result); err == nil && len(result.IPs) == 0 {
			err = fmt.Errorf("no address in the CNI plugin's result for %s: %s", pod.Name, out)
		}
	}
	if err != nil {
		// As containerd does after a failed ADD: DEL releases whatever the plugin got.
		_, _ = n.cni(p, "DEL")
		ns.Delete()
		return nil, err
	}
	p.IP, _, _ = strings.Cut(result.IPs[0].Address, "/")
	return p, nil
}

// Stop calls the CNI plugin's DEL for the pod, deletes its network namespace and its Pod object, at once, as kubelet
// does once the pod's sandbox is gone (pkg/kubelet/status status_manager.go: a grace period of 0, the pod's UID as
// precondition), so that its name is free again.
func (p *WorkloadPod) Stop(ctx context.Context, env *testenv.Env) error {
	_, err := p.Node.cni(p, "DEL")
	p.netns.Delete()
	if dErr := env.Client.Delete(ctx, p.Pod, client.GracePeriodSeconds(0), client.Preconditions{UID: &p.Pod.UID}); client.IgnoreNotFound(dErr) != nil && err == nil {
		err = dErr
	}
	return err
}

// cni runs the CNI plugin of the node's agent image with command for p in the node's network namespace, with the node's /var/run/cilium
// (the agent's socket, the deletion queue the plugin writes when the agent is away) at that path, and returns its
// output. The plugin's configuration is the first of the conflist the agent wrote, with the list's name and
// cniVersion, as libcni gives it (libcni api.go buildOneConfig).
func (n *Node) cni(p *WorkloadPod, command string) ([]byte, error) {
	n.mu.Lock()
	image := n.cniImage
	n.mu.Unlock()
	plugin, err := ciliumbin.PathFor(ciliumbin.CNI, image)
	if err != nil {
		return nil, err
	}
	conf, err := n.cniPluginConfig()
	if err != nil {
		return nil, err
	}
	netnsFile, err := os.Open("/run/netns/" + p.netns.Name())
	if err != nil {
		return nil, err
	}
	defer netnsFile.Close()
	script := "set -e; mount -t tmpfs tmpfs /run; mkdir -p /run/cilium; mount --bind \"$0\" /run/cilium; exec \"$1\""
	cmd := n.netns.Command("unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c", script,
		filepath.Join(n.host, hostCiliumRun), plugin)
	// The namespace's file stays open in the plugin as fd 3, so that its path survives the tmpfs over /run.
	cmd.ExtraFiles = []*os.File{netnsFile}
	cmd.Env = append(os.Environ(),
		"CNI_COMMAND="+command, "CNI_CONTAINERID="+p.containerID, "CNI_NETNS=/proc/self/fd/3", "CNI_IFNAME=eth0",
		"CNI_PATH=/opt/cni/bin",
		fmt.Sprintf("CNI_ARGS=IgnoreUnknown=1;K8S_POD_NAMESPACE=%s;K8S_POD_NAME=%s;K8S_POD_INFRA_CONTAINER_ID=%s;K8S_POD_UID=%s",
			p.Pod.Namespace, p.Pod.Name, p.containerID, p.Pod.UID))
	cmd.Stdin = bytes.NewReader(conf)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("cilium-cni %s for %s on %s: %w: %s%s", command, p.Pod.Name, n.Name, err, out, stderr.String())
	}
	return out, nil
}

// cniPluginConfig is the plugin configuration of the conflist the node's agent wrote.
func (n *Node) cniPluginConfig() ([]byte, error) {
	raw, err := os.ReadFile(filepath.Join(n.host, hostCNIConfDir, "05-cilium.conflist"))
	if err != nil {
		return nil, fmt.Errorf("the agent of %s wrote no CNI configuration: %w", n.Name, err)
	}
	var list struct {
		CNIVersion string                   `json:"cniVersion"`
		Name       string                   `json:"name"`
		Plugins    []map[string]interface{} `json:"plugins"`
	}
	if err := json.Unmarshal(raw, &list); err != nil || len(list.Plugins) == 0 {
		return nil, fmt.Errorf("the CNI configuration of %s: %s (%v)", n.Name, raw, err)
	}
	plugin := list.Plugins[0]
	plugin["name"], plugin["cniVersion"] = list.Name, list.CNIVersion
	return json.Marshal(plugin)
}

// Serve answers "hello" on the pod's address and port until the returned stop is called.
func (p *WorkloadPod) Serve(port int) (stop func(), err error) {
	var listener net.Listener
	if err := p.netns.Do(func() error {
		var err error
		listener, err = net.Listen("tcp", net.JoinHostPort(p.IP, strconv.Itoa(port)))
		return err
	}); err != nil {
		return nil, err
	}
	go func() {
		for {
			c, err := listener.Accept()
			if err != nil {
				return
			}
			_, _ = io.WriteString(c, "hello")
			c.Close()
		}
	}()
	return func() { listener.Close() }, nil
}

// Dial connects from the pod to the server of to on port and reads its answer, within timeout.
func (p *WorkloadPod) Dial(to *WorkloadPod, port int, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	conn, err := p.netns.DialContext(ctx, "tcp", net.JoinHostPort(to.IP, strconv.Itoa(port)))
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(timeout))
	got, err := io.ReadAll(conn)
	if err != nil {
		return &ReadError{err}
	}
	if string(got) != "hello" {
		return errors.New("answered " + string(got))
	}
	return nil
}

// ReadError is a connection that was established but whose answer did not come: not a drop.
type ReadError struct{ error }

func (e *ReadError) Unwrap() error { return e.error }

// Dropped says whether err is a connection attempt that timed out: dropped on its way, as a policy drops it, not
// refused, and not established.
func Dropped(err error) bool {
	var netErr net.Error
	var readErr *ReadError
	return errors.As(err, &netErr) && netErr.Timeout() && !errors.As(err, &readErr)
}
