// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package ciliumnodes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gardener/gardener/pkg/utils/kubernetes/health"

	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/kubelet"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/podrun"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/testenv"
)

// The extension runs as on a self-hosted shoot: its chart's DaemonSet pod on every control-plane node, in the node's
// network namespace (hostNetwork), reaching kube-apiserver at the node's localhost:443, probing the kube-apiservers
// from the node network and handing the L2 announcement lease to its own node. The pods are those Kubernetes' DaemonSet
// controller stored for the nodes, so that their tokens are bound to them and carry their node, as kubelet's projected
// tokens do. The extension env started on this machine's network (RunSuite) stops while they run.
//
// kube-apiserver calls the webhook at the URL the chart names, on loopback (webhookAddress): every control-plane node's
// kube-apiserver its own node's pod. envtest's one kube-apiserver, on this machine's loopback, stands for them all;
// webhookRoute carries each of its connections to the loopback of the first control-plane node whose pod is ready and
// accepts, at the port the chart gives the pod's webhook server.

// webhookDialTimeout bounds the connection to one pod's webhook server before the next is tried.
const webhookDialTimeout = 500 * time.Millisecond

// runExtension stops env's extension and starts the chart's pod on every control-plane node, and the route to their
// webhook servers, and waits until each pod is ready.
func (c *Cluster) runExtension(ctx context.Context) error {
	daemonSet := &appsv1.DaemonSet{}
	if err := c.env.Client.Get(ctx, client.ObjectKey{Namespace: testenv.ExtensionNamespace, Name: testenv.ServiceAccountName}, daemonSet); err != nil {
		return err
	}
	port, err := podrun.WebhookServerPort(&daemonSet.Spec.Template.Spec)
	if err != nil {
		return err
	}
	address := c.env.Extensions().WebhookAddress()
	c.env.Extensions().Stop(ctx, false)
	c.extensionStopped = true
	l, err := net.Listen("tcp", address)
	if err != nil {
		return fmt.Errorf("the route to the extension pods' webhook servers at %s: %w", address, err)
	}
	c.webhookRoute = l
	c.routes.Go(func() { c.routeWebhooks(l, port) })
	return c.startExtensions(ctx, nil)
}

// ExtensionArgs restarts the extension pods with args added to their chart's (nil: as the chart has them), unless
// they run with those.
func (c *Cluster) ExtensionArgs(ctx context.Context, args ...string) error {
	if c.webhookRoute == nil {
		return fmt.Errorf("the extension does not run as pods (Options.ExtensionPods)")
	}
	c.mu.Lock()
	same := slices.Equal(c.extensionArgs, args)
	if !same {
		c.extensionsManaged = false
	}
	c.mu.Unlock()
	if same {
		return nil
	}
	c.extensionStarts.Wait()
	for _, n := range c.nodes {
		n.stopExtension()
	}
	return c.startExtensions(ctx, args)
}

// startExtensions starts the extension pod on every control-plane node and waits until each is ready and one of them
// leads.
func (c *Cluster) startExtensions(ctx context.Context, args []string) error {
	c.mu.Lock()
	c.extensionArgs = args
	c.mu.Unlock()
	started := time.Now()
	var starting sync.WaitGroup
	errs := make(chan error, len(c.nodes))
	for _, n := range c.Nodes() {
		if n.ControlPlane {
			n.mu.Lock()
			n.extensionStarting = true
			n.mu.Unlock()
			starting.Go(func() {
				defer func() {
					n.mu.Lock()
					n.extensionStarting = false
					n.mu.Unlock()
				}()
				errs <- n.startExtension(ctx, c.env, filepath.Join(c.cgroups, n.Name+"-extension"), args)
			})
		}
	}
	starting.Wait()
	c.mu.Lock()
	c.extensionsManaged = true
	c.mu.Unlock()
	close(errs)
	for err := range errs {
		if err != nil && !errors.Is(err, errExtensionExited) {
			return err
		}
	}
	if err := c.waitForExtensions(ctx); err != nil {
		return err
	}
	// A pod stopped gracefully releases the leader lease (ReleaseOnCancel); one that did not leaves it to expire.
	return c.waitForExtensionLeader(ctx, time.Minute, func(lease coordinationv1.LeaseSpec) bool {
		return lease.AcquireTime != nil && lease.AcquireTime.After(started.Add(-time.Second))
	})
}

// WaitForExtensionLeader waits up to three minutes until an extension pod leads, renewing its lease after this call:
// its leader term runs the controllers. After kube-apiserver was away, a term may still be pausing after failures in
// a row (pkg/processmodel), and a case that needs the controllers would wait for it on its own clock.
func (c *Cluster) WaitForExtensionLeader(ctx context.Context) error {
	since := time.Now()
	return c.waitForExtensionLeader(ctx, 3*time.Minute, func(lease coordinationv1.LeaseSpec) bool {
		return lease.RenewTime != nil && lease.RenewTime.After(since)
	})
}

// waitForExtensionLeader waits up to timeout until an extension pod holds the leader lease and fresh says that its
// lease is of the term waited for.
func (c *Cluster) waitForExtensionLeader(ctx context.Context, timeout time.Duration, fresh func(coordinationv1.LeaseSpec) bool) error {
	lease := &coordinationv1.Lease{}
	if err := testenv.WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		if err := c.env.Client.Get(ctx, client.ObjectKey{Namespace: testenv.ExtensionNamespace, Name: extensionLeaderLease}, lease); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		return ptr.Deref(lease.Spec.HolderIdentity, "") != "" && fresh(lease.Spec), nil
	}); err != nil {
		return fmt.Errorf("no extension pod leads: %w (lease %+v)", err, lease.Spec)
	}
	return nil
}

// extensionLeaderLease is the extension's leader election lease (Gardener's LeaderElectionNameID of its name).
const extensionLeaderLease = "cilium-selfhosted-leader-election"

// stopExtension stops the pods and the route, and starts env's extension again.
func (c *Cluster) stopExtension() error {
	c.mu.Lock()
	c.extensionsManaged = false
	c.mu.Unlock()
	c.extensionStarts.Wait()
	for _, n := range c.nodes {
		n.stopExtension()
	}
	if c.webhookRoute != nil {
		_ = c.webhookRoute.Close()
		c.routes.Wait()
	}
	if !c.extensionStopped {
		return nil
	}
	return c.env.Extensions().StartAgain()
}

// routeWebhooks carries the test kube-apiserver's webhook calls, which stand for each control-plane node's
// kube-apiserver calling its own node's extension pod on loopback, into a node that calls webhooks (dialWebhook), for
// as long as that node does (endWebhookCalls).
func (c *Cluster) routeWebhooks(l net.Listener, port string) {
	var conns sync.WaitGroup
	defer conns.Wait()
	for {
		in, err := l.Accept()
		if err != nil {
			return
		}
		conns.Go(func() {
			defer in.Close()
			out, n, err := c.dialWebhook(port)
			if err != nil {
				return
			}
			defer out.Close()
			if !n.addWebhookCall(in) {
				return
			}
			defer n.removeWebhookCall(in)
			done := make(chan struct{}, 2)
			go func() { _, _ = io.Copy(out, in); done <- struct{}{} }()
			go func() { _, _ = io.Copy(in, out); done <- struct{}{} }()
			<-done
		})
	}
}

// dialWebhook connects, inside the node as its kube-apiserver does, to the loopback of the first control-plane node
// that calls webhooks and whose extension pod is ready and accepts. A pod that is not ready yet may answer from
// informers that have not synced.
func (c *Cluster) dialWebhook(port string) (net.Conn, *Node, error) {
	var errs []error
	for _, n := range c.Nodes() {
		if !n.ControlPlane || !n.callsWebhooks() || !n.servingExtension() {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), webhookDialTimeout)
		conn, err := n.netns.DialContext(ctx, "tcp", net.JoinHostPort("127.0.0.1", port))
		cancel()
		if err == nil {
			return conn, n, nil
		}
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		return nil, nil, errors.New("no extension pod is ready")
	}
	return nil, nil, errors.Join(errs...)
}

// callsWebhooks says whether the node's kube-apiserver calls webhooks: not while it is switched off, nor while the
// node hangs.
func (n *Node) callsWebhooks() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.callsWebhooksLocked()
}

func (n *Node) callsWebhooksLocked() bool { return !n.apiServerOff && !n.silenced }

// addWebhookCall records a connection routed to the node's extension pod, unless the node calls no webhooks (any
// more): then it says false.
func (n *Node) addWebhookCall(conn net.Conn) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.callsWebhooksLocked() {
		return false
	}
	if n.webhookCalls == nil {
		n.webhookCalls = map[net.Conn]struct{}{}
	}
	n.webhookCalls[conn] = struct{}{}
	return true
}

func (n *Node) removeWebhookCall(conn net.Conn) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.webhookCalls, conn)
}

// endWebhookCalls closes the connections routed to the node's extension pod once its kube-apiserver stopped calling:
// kube-apiserver keeps its connections to a webhook open across calls, and the node's loopback stays up when its link
// goes down, so without this the calls of every node's kube-apiserver would go on to a pod cut off from kube-apiserver,
// whose informers no longer follow it (session 28's TestVIPFailover failure, docs/development/testing.md).
func (n *Node) endWebhookCalls() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for conn := range n.webhookCalls {
		_ = conn.Close()
	}
	clear(n.webhookCalls)
}

// startExtension runs the extension container of the node's stored pod, in cgroup, with args added, and reports the
// pod running and, once it passes its readiness probe, ready, as kubelet does.
func (n *Node) startExtension(ctx context.Context, env *testenv.Env, cgroup string, args []string) error {
	if err := os.MkdirAll(cgroup, 0o755); err != nil {
		return err
	}
	// The DaemonSet controller stores the node's pod soon after the node is Ready.
	var c podrun.Container
	if err := testenv.WaitFor(ctx, daemonSetPodsTimeout, func(ctx context.Context) (bool, error) {
		var err error
		c, err = podrun.ForExtension(ctx, env, n.Name, n.Address())
		return err == nil && c.Pod.UID != "", err
	}); err != nil {
		return fmt.Errorf("no pod of the extension's DaemonSet was stored for %s: %w", n.Name, err)
	}
	// A host-network pod keeps the address it started with (kubelet_pods.go generateAPIPodStatus).
	if c.Pod.Status.PodIP != "" {
		c.PodIP = c.Pod.Status.PodIP
	}
	dir := filepath.Join(env.Dir, "nodes", n.Name, "extension")
	c.Dir, c.LogPath, c.Cgroup, c.Args = dir, filepath.Join(dir, "extension.log"), cgroup, args
	// The last pod's log stays, as kubelet keeps the previous container's (kubectl logs --previous).
	if err := os.Rename(c.LogPath, c.LogPath+previousLog); err != nil && !os.IsNotExist(err) {
		return err
	}
	started, err := n.sandbox.Start(c)
	if err != nil {
		return err
	}
	n.mu.Lock()
	n.extension, n.extensionPod, n.extensionCgroup = started, c.Pod.UID, cgroup
	n.mu.Unlock()
	if err := reportExtension(ctx, env, c.Pod, c.PodIP, false); err != nil {
		return err
	}
	probe := n.sandbox.ReadinessProbe(c, started)
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		select {
		case <-started.Stopped():
			// As a container that exits: kubelet starts it again, or finishes its deleted pod.
			n.forgetExtension(started)
			return false, fmt.Errorf("%w: %s\n%s", errExtensionExited, n.Name, started.LogTail(10))
		default:
		}
		ready, _ := probe(ctx)
		return ready, nil
	}); err != nil {
		if errors.Is(err, errExtensionExited) {
			return err
		}
		return fmt.Errorf("the extension pod on %s is not ready: %w\n%s", n.Name, err, started.LogTail(40))
	}
	if err := reportExtension(ctx, env, c.Pod, c.PodIP, true); err != nil {
		return err
	}
	n.mu.Lock()
	if n.extension == started {
		n.extensionReady = started
	}
	n.mu.Unlock()
	return nil
}

// servingExtension says whether the node's extension pod runs and is reported ready.
func (n *Node) servingExtension() bool {
	p, _ := n.runningExtension()
	n.mu.Lock()
	defer n.mu.Unlock()
	return p != nil && p == n.extensionReady
}

// errExtensionExited: the extension process exited before it was ready (it replaced a pod whose address is stale).
var errExtensionExited = errors.New("the extension exited before it was ready")

// forgetExtension drops the node's extension process p once it has exited.
func (n *Node) forgetExtension(p *podrun.Started) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.extension == p {
		n.extension, n.extensionPod = nil, ""
	}
}

// runningExtension is the node's extension process and its pod, nil when none runs (or it exited).
func (n *Node) runningExtension() (*podrun.Started, types.UID) {
	n.mu.Lock()
	p, uid := n.extension, n.extensionPod
	n.mu.Unlock()
	if p == nil {
		return nil, ""
	}
	select {
	case <-p.Stopped():
		n.forgetExtension(p)
		return nil, ""
	default:
		return p, uid
	}
}

// waitForExtensions waits until every control-plane node runs the extension from its stored pod, and that pod is
// ready.
func (c *Cluster) waitForExtensions(ctx context.Context) error {
	daemonSet := &appsv1.DaemonSet{}
	if err := c.env.Client.Get(ctx, client.ObjectKey{Namespace: testenv.ExtensionNamespace, Name: testenv.ServiceAccountName}, daemonSet); err != nil {
		return err
	}
	var waiting []string
	err := testenv.WaitFor(ctx, 2*time.Minute, func(ctx context.Context) (bool, error) {
		waiting = nil
		for _, n := range c.Nodes() {
			if !n.ControlPlane {
				continue
			}
			pod, err := podrun.StoredExtensionPod(ctx, c.env, daemonSet, n.Name)
			if err != nil {
				return false, err
			}
			if p, uid := n.runningExtension(); p == nil || pod == nil || uid != pod.UID || !health.IsPodReady(pod) {
				waiting = append(waiting, n.Name)
			}
		}
		return len(waiting) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("no ready extension pod runs on %v: %w", waiting, err)
	}
	return nil
}

// reportExtension reports pod running (and ready) at podIP, as kubelet does.
func reportExtension(ctx context.Context, env *testenv.Env, pod *corev1.Pod, podIP string, ready bool) error {
	current := &corev1.Pod{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(pod), current); err != nil || current.UID != pod.UID {
		return client.IgnoreNotFound(err)
	}
	kubelet.ReportRunning(current, ready)
	current.Status.HostIP, current.Status.PodIP = podIP, podIP
	current.Status.HostIPs, current.Status.PodIPs = []corev1.HostIP{{IP: podIP}}, []corev1.PodIP{{IP: podIP}}
	return client.IgnoreNotFound(env.Client.Status().Update(ctx, current))
}

// syncExtensionPods does for the extension's pods what kubelet does: a deleted pod's process gets SIGTERM (and
// SIGKILL after the grace period), the pod is reported terminal and deleted for good; a node whose pod was replaced
// runs the new one (the DaemonSet controller makes it once the old one is gone), on the node's address now.
func (c *Cluster) syncExtensionPods(ctx context.Context) (pending bool) {
	daemonSet := &appsv1.DaemonSet{}
	if err := c.env.Client.Get(ctx, client.ObjectKey{Namespace: testenv.ExtensionNamespace, Name: testenv.ServiceAccountName}, daemonSet); err != nil {
		return !apierrors.IsNotFound(err)
	}
	list := &corev1.PodList{}
	if err := c.env.Client.List(ctx, list, client.InNamespace(daemonSet.Namespace), client.MatchingLabels(daemonSet.Spec.Selector.MatchLabels)); err != nil {
		return true
	}
	for i := range list.Items {
		pod := &list.Items[i]
		n := c.nodes[pod.Spec.NodeName]
		if n == nil || !n.ControlPlane {
			continue
		}
		p, uid := n.runningExtension()
		n.mu.Lock()
		runs, starting := p != nil && uid == pod.UID, n.extensionStarting
		n.mu.Unlock()
		pending = pending || pod.DeletionTimestamp != nil || starting || (c.extensionsManaged && !runs)
		switch {
		case pod.DeletionTimestamp != nil:
			var stop func(context.Context) int32
			if runs {
				stop = n.stopExtensionWithin
			}
			if err := c.finishDeleted(ctx, n, pod, stop, "the extension"); err != nil {
				c.logf("kubelet of %s: extension pod %s: %v", n.Name, pod.Name, err)
			}
		case c.extensionsManaged && !runs && !starting && n.extensionIdle():
			n.mu.Lock()
			n.extensionStarting = true
			n.mu.Unlock()
			args := c.extensionArgs
			cgroup := filepath.Join(c.cgroups, n.Name+"-extension")
			c.extensionStarts.Go(func() {
				defer func() {
					n.mu.Lock()
					n.extensionStarting = false
					n.mu.Unlock()
				}()
				if err := n.startExtension(context.Background(), c.env, cgroup, args); err != nil {
					c.logf("kubelet of %s: extension pod %s: %v", n.Name, pod.Name, err)
					return
				}
				c.logf("kubelet of %s: the extension runs from pod %s at %s", n.Name, pod.Name, n.Address())
			})
		}
	}
	return pending
}

// extensionIdle says whether no extension process runs on the node.
func (n *Node) extensionIdle() bool {
	p, _ := n.runningExtension()
	return p == nil
}

func (n *Node) stopExtension() { n.stopExtensionWithin(context.Background()) }

// stopExtensionWithin stops the node's extension process, SIGKILL once ctx ends, and returns its exit code as a
// runtime reports it.
func (n *Node) stopExtensionWithin(ctx context.Context) int32 {
	n.mu.Lock()
	p := n.extension
	n.extension, n.extensionPod = nil, ""
	n.mu.Unlock()
	if p == nil {
		return 0
	}
	_ = n.freezeExtension(false)
	p.Stop(ctx)
	return exitCode(p.Err())
}

// freezeExtension stops (or lets go on) every process of the node's extension pod, as a hung kernel does.
func (n *Node) freezeExtension(frozen bool) error {
	n.mu.Lock()
	cgroup := n.extensionCgroup
	n.mu.Unlock()
	if cgroup == "" {
		return nil
	}
	v := "0"
	if frozen {
		v = "1"
	}
	return os.WriteFile(filepath.Join(cgroup, "cgroup.freeze"), []byte(v), 0o644)
}

// ExtensionLogTail is the end of the node's extension pod's log.
func (n *Node) ExtensionLogTail(lines int) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.extension == nil {
		return ""
	}
	return n.extension.LogTail(lines)
}

// previousLog is the suffix of the log of the node's extension pod before the running one.
const previousLog = ".previous"

// PreviousExtensionLogTail is the end of the log of the extension pod that ran on the node before the running one,
// "" when there was none.
func (n *Node) PreviousExtensionLogTail(lines int) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.extension == nil {
		return ""
	}
	b, err := os.ReadFile(n.extension.LogPath() + previousLog)
	if err != nil {
		return ""
	}
	all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(all[max(0, len(all)-lines):], "\n")
}

// extensionLogTimes are the times of the lines of the node's extension pod's log that contain substr, read from their
// "ts" (zap's JSON encoder, as the chart runs it).
func (n *Node) extensionLogTimes(substr string) []time.Time {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.extension == nil {
		return nil
	}
	var times []time.Time
	for _, line := range strings.Split(n.extension.Log(), "\n") {
		var entry struct {
			TS time.Time `json:"ts"`
		}
		if strings.Contains(line, substr) && json.Unmarshal([]byte(line), &entry) == nil {
			times = append(times, entry.TS)
		}
	}
	return times
}
