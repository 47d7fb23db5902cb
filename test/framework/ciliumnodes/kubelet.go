// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package ciliumnodes

import (
	"context"
	"fmt"
	"slices"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gardener/gardener/pkg/utils/kubernetes/health"

	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/kubelet"
)

// The harness is the nodes' kubelet for the agent pods of the stored chart (Gardener's unless Options say otherwise), the one part of a node that cannot run
// here. Kubernetes' DaemonSet controller creates those pods from the stored DaemonSet (through the webhook) and the
// scheduler binds them; the harness does what kubelet then does, in kubelet's order (k8s.io/kubernetes pkg/kubelet):
//   - a pod bound to a node: its agent runs from it (with what Run asked for; a start that failed is tried again), the
//     pod is reported Running, and Ready once the agent passes its readiness probe;
//   - a pod being deleted: its agent gets SIGTERM and, after the grace period (kubelet gives a container at least 2 s:
//     kuberuntime/kuberuntime_container.go minimumGracePeriodInSeconds), SIGKILL; the pod is reported terminal
//     (kubelet_pods.go getPhase with podIsTerminal) and then deleted with grace period 0 and a UID precondition, as the
//     status manager finishes a deletion (status/status_manager.go). The DaemonSet controller creates the replacement
//     once the pod is terminal: until then a terminating pod still counts as the node's pod, Cilium's agent DaemonSet
//     not surging (pkg/controller/daemon/daemon_controller.go getNodesToDaemonPods, podsShouldBeOnNode);
//   - the operator's container exiting by itself (Cilium's operator exits when it loses its leader lease, e.g. while
//     the kube-apiserver it talks to is unreachable for longer than the renew deadline): it is started again, at once
//     the first time and then after kubelet's crash-loop back-off (restartPolicy Always; kuberuntime/
//     kuberuntime_manager.go doBackOff, kubelet.go newCrashLoopBackOff).

// daemonSetPodsTimeout bounds how long the DaemonSet controller and the scheduler may take to give each node its pod.
const daemonSetPodsTimeout = time.Minute

// waitForDaemonSetPods waits until each node has a bound pod of the stored agent DaemonSet, and records them.
func (c *Cluster) waitForDaemonSetPods(ctx context.Context, inst *installation) error {
	var missing []string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, daemonSetPodsTimeout, true, func(ctx context.Context) (bool, error) {
		pods, err := c.daemonSetPods(ctx, inst)
		if err != nil {
			return false, err
		}
		missing = nil
		for _, n := range c.Nodes() {
			if p := pods[n.Name]; p != nil && p.DeletionTimestamp == nil {
				inst.pods[n.Name] = p
			} else {
				missing = append(missing, n.Name)
			}
		}
		return len(missing) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("the agent DaemonSet has no bound pod on %v: %w\n%s", missing, err, c.kubernetes.Logs())
	}
	return nil
}

// daemonSetPods are the pods of the stored agent DaemonSet bound to the nodes, by node; of several pods on a node
// (one terminating beside its replacement), the one not terminating.
func (c *Cluster) daemonSetPods(ctx context.Context, inst *installation) (map[string]*corev1.Pod, error) {
	ds := &appsv1.DaemonSet{}
	if err := c.env.Client.Get(ctx, client.ObjectKeyFromObject(inst.agent), ds); err != nil {
		return nil, err
	}
	list := &corev1.PodList{}
	if err := c.env.Client.List(ctx, list, client.InNamespace(ds.Namespace), client.MatchingLabels(ds.Spec.Selector.MatchLabels)); err != nil {
		return nil, err
	}
	out := map[string]*corev1.Pod{}
	for i := range list.Items {
		p := &list.Items[i]
		if owner := metav1.GetControllerOf(p); owner == nil || owner.UID != ds.UID || c.nodes[p.Spec.NodeName] == nil {
			continue
		}
		if prev := out[p.Spec.NodeName]; prev == nil || prev.DeletionTimestamp != nil {
			out[p.Spec.NodeName] = p
		}
	}
	return out, nil
}

// kubeletTick is how often the nodes' kubelet looks at what it runs: the operator's container, and the pods on their
// way (bound, started, not yet ready; being deleted), whose readiness it reports as kubelet's prober does.
const kubeletTick = 100 * time.Millisecond

// kubeletResync is how often it lists its pods when no watch event came and none is on its way: it catches what a
// broken watch (a stopped kube-apiserver) missed.
const kubeletResync = time.Second

// runKubelets is the nodes' kubelet until ctx ends. It syncs the pods whenever a pod changed, as kubelet works from a
// watch of its pods (k8s.io/kubernetes pkg/kubelet/config/apiserver.go); every kubeletTick while one is on its way;
// else every kubeletResync. Listing every tick instead made half of a lane's kube-apiserver requests.
func (c *Cluster) runKubelets(ctx context.Context) {
	changed := make(chan struct{}, 1)
	go c.watchPods(ctx, changed)
	pending, listed := true, time.Time{}
	for ctx.Err() == nil {
		if pending || time.Since(listed) >= kubeletResync {
			listed = time.Now()
			pending = c.syncPods(ctx)
		} else {
			c.mu.Lock()
			c.syncOperator(ctx)
			c.mu.Unlock()
		}
		select {
		case <-ctx.Done():
		case <-changed:
			pending = true
		case <-time.After(kubeletTick):
		}
	}
}

// watchPods signals changed at every event of a pod of the cluster until ctx ends, watching again after a broken
// watch.
func (c *Cluster) watchPods(ctx context.Context, changed chan<- struct{}) {
	clientset, err := kubernetes.NewForConfig(c.env.Config)
	if err != nil {
		c.logf("kubelets: no watch of the pods, listing them every %s: %v", kubeletResync, err)
		return
	}
	for ctx.Err() == nil {
		if w, err := clientset.CoreV1().Pods("").Watch(ctx, metav1.ListOptions{}); err == nil {
			for range w.ResultChan() {
				select {
				case changed <- struct{}{}:
				default:
				}
			}
			w.Stop()
		}
		select {
		case <-ctx.Done():
		case <-time.After(kubeletResync):
		}
	}
}

// syncPods syncs the extension's pods, the operator and the agent pods of the stored chart, and says whether one of
// them is on its way.
func (c *Cluster) syncPods(ctx context.Context) (pending bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	pending = c.syncExtensionPods(ctx)
	c.syncOperator(ctx)
	inst := c.installed[c.stored]
	if inst == nil {
		return pending
	}
	list := &corev1.PodList{}
	if err := c.env.Client.List(ctx, list, client.InNamespace(inst.agent.Namespace), client.MatchingLabels(inst.agent.Spec.Selector.MatchLabels)); err != nil {
		return true
	}
	for i := range list.Items {
		pod := &list.Items[i]
		n := c.nodes[pod.Spec.NodeName]
		if n == nil || metav1.GetControllerOf(pod) == nil {
			continue
		}
		if err := c.syncPod(ctx, inst, n, pod); err != nil {
			c.logf("kubelet of %s: pod %s: %v", n.Name, pod.Name, err)
			pending = true
		}
		if pod.DeletionTimestamp != nil || (n.runs(pod.UID) && !health.IsPodReady(pod)) {
			pending = true
		}
	}
	return pending
}

// newCrashLoopBackOff is kubelet's back-off between restarts of a container that keeps exiting: 10 s doubling up to
// 5 min, forgotten after 10 min without an exit (pkg/kubelet/kubelet.go initialCrashLoopBackOff, MaxCrashLoopBackOff
// and the HasExpiredFunc it sets).
func newCrashLoopBackOff() *flowcontrol.Backoff {
	b := flowcontrol.NewBackOff(10*time.Second, 5*time.Minute)
	b.HasExpiredFunc = func(eventTime, lastUpdate time.Time, _ time.Duration) bool {
		return eventTime.Sub(lastUpdate) > 10*time.Minute
	}
	return b
}

// syncOperator starts the operator container again once it exited by itself, as kubelet does: its first exit is
// restarted at once, later ones only once the back-off since the exit has passed. An operator the harness stopped
// (Node.Stop, Node.Kill) is no longer the node's and stays stopped.
func (c *Cluster) syncOperator(ctx context.Context) {
	if c.operatorPod == nil {
		return
	}
	n := c.nodes[OperatorNode]
	n.mu.Lock()
	operator := n.operator
	n.mu.Unlock()
	if operator == nil {
		return
	}
	select {
	case <-operator.Stopped():
	default:
		return
	}
	if c.operatorExited.IsZero() {
		c.operatorExited = time.Now()
		c.logf("kubelet of %s: cilium-operator exited with %d; its log ends:\n%s", n.Name, exitCode(operator.Err()), operator.LogTail(5))
	}
	key := string(c.operatorPod.UID) + "/cilium-operator"
	if c.operatorCrashLoop.IsInBackOffSince(key, c.operatorExited) {
		return
	}
	c.operatorCrashLoop.Next(key, c.operatorExited)
	if err := c.runOperator(ctx); err != nil {
		c.logf("kubelet of %s: starting cilium-operator again: %v", n.Name, err)
		return
	}
	c.logf("kubelet of %s: cilium-operator started again (should it exit again: back-off %s)", n.Name, c.operatorCrashLoop.Get(key))
	c.operatorExited = time.Time{}
}

// minimumGracePeriod is the least time kubelet gives a container between SIGTERM and SIGKILL.
const minimumGracePeriod = 2 * time.Second

// gracePeriod is how long kubelet lets pod's containers run between SIGTERM and SIGKILL: its termination grace period
// (Kubernetes' default 30 s), at least minimumGracePeriod (the charts' 1 s is 2 s on a real node).
func gracePeriod(pod *corev1.Pod) time.Duration {
	if pod == nil || pod.Spec.TerminationGracePeriodSeconds == nil {
		return 30 * time.Second
	}
	return max(minimumGracePeriod, time.Duration(*pod.Spec.TerminationGracePeriodSeconds)*time.Second)
}

func (c *Cluster) syncPod(ctx context.Context, inst *installation, n *Node, pod *corev1.Pod) error {
	if pod.DeletionTimestamp != nil {
		var stop func(context.Context) int32
		if n.runs(pod.UID) {
			stop = n.stopAgent
		}
		return c.finishDeleted(ctx, n, pod, stop, "its agent")
	}
	// The stored chart is what runs: a new pod on the node replaces the one its agent ran, recorded once its agent
	// started.
	if c.running != nil && c.running.Chart == c.stored && inst.pods[n.Name].UID != pod.UID {
		configMaps, err := c.kubeSystemConfigMaps(ctx)
		if err != nil {
			return err
		}
		run := pod
		if slices.Contains(c.running.ClientDefaults, n.Name) {
			run = withClientDefaults(pod)
		}
		if err := n.restart(ctx, c.env, run, configMaps); err != nil {
			return err
		}
		c.logf("kubelet of %s: the agent runs from pod %s (was %s)", n.Name, pod.Name, inst.pods[n.Name].Name)
		inst.pods[n.Name] = pod
	}
	if health.IsPodReady(pod) || !n.runs(pod.UID) {
		return nil
	}
	ready, _ := n.Ready(ctx)
	if pod.Status.Phase == corev1.PodRunning && !ready {
		return nil
	}
	kubelet.ReportRunning(pod, ready)
	ip := n.Address() // a hostNetwork pod's
	pod.Status.HostIP, pod.Status.PodIP = ip, ip
	pod.Status.HostIPs, pod.Status.PodIPs = []corev1.HostIP{{IP: ip}}, []corev1.PodIP{{IP: ip}}
	return client.IgnoreNotFound(c.env.Client.Status().Update(ctx, pod))
}

// finishDeleted does what kubelet does with a pod being deleted: its container (stop, nil when none runs) gets the
// pod's grace period, at least minimumGracePeriod, before SIGKILL; the pod is reported terminal and then deleted for
// good, with a precondition on its UID.
func (c *Cluster) finishDeleted(ctx context.Context, n *Node, pod *corev1.Pod, stop func(context.Context) int32, what string) error {
	var exitCode int32
	if stop != nil {
		grace, cancel := context.WithTimeout(ctx, max(minimumGracePeriod, time.Duration(ptr.Deref(pod.DeletionGracePeriodSeconds, 0))*time.Second))
		exitCode = stop(grace)
		cancel()
	}
	if pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed {
		kubelet.ReportTerminated(pod, exitCode)
		if err := c.env.Client.Status().Update(ctx, pod); err != nil {
			return client.IgnoreNotFound(err)
		}
	}
	c.logf("kubelet of %s: pod %s deleted, %s exited with %d", n.Name, pod.Name, what, exitCode)
	return client.IgnoreNotFound(c.env.Client.Delete(ctx, pod, client.GracePeriodSeconds(0), client.Preconditions{UID: &pod.UID}))
}

// logf writes what the nodes' kubelet did to Options.KubeletLog: by default the output of the test that runs, which a
// failing test shows.
func (c *Cluster) logf(format string, args ...any) {
	fmt.Fprintf(c.kubeletLog, time.Now().Format("15:04:05.000")+" "+format+"\n", args...)
}

// runningPod is the node's pod of the agent DaemonSet, if any, and whether the node's agent runs from it, Ready and
// not terminating.
func (c *Cluster) runningPod(ctx context.Context, n *Node) (*corev1.Pod, bool) {
	c.mu.Lock()
	inst := c.installed[c.stored]
	c.mu.Unlock()
	if inst == nil {
		return nil, false
	}
	pods, err := c.daemonSetPods(ctx, inst)
	if err != nil || pods[n.Name] == nil {
		return nil, false
	}
	pod := pods[n.Name]
	return pod, pod.DeletionTimestamp == nil && n.runs(pod.UID) && health.IsPodReady(pod)
}
