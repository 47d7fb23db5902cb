// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package ciliumnodes

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
)

// MoveNode gives the node of that name the InternalIP ip in place of its current one, on the node first and then on
// its Node, as its kubelet reports an address that changed (a DHCP lease that moved, or the node rebuilt at a new
// address). Its running agent keeps running; the next Run starts it afresh.
func (c Repins) MoveNode(ctx context.Context, name, ip string) error {
	n := c.nodes[name]
	if n == nil {
		return fmt.Errorf("no node %s", name)
	}
	if err := n.move(ip); err != nil {
		return fmt.Errorf("moving %s to %s: %w", name, ip, err)
	}
	return c.env.SetInternalIP(ctx, name, ip)
}

// AgentPod is the pod of the stored chart that the node of that name runs, or is to run, nil before Run installed
// that chart.
func (c Repins) AgentPod(name string) *corev1.Pod {
	c.mu.Lock()
	defer c.mu.Unlock()
	if inst := c.installed[c.stored]; inst != nil && inst.pods[name] != nil {
		return inst.pods[name].DeepCopy()
	}
	return nil
}

// Repin is how the agent of a node came back after the control-plane addresses its pod was pinned to changed.
type Repin struct {
	// Pod is the pod the agent runs from now, To the control-plane node it is connected to.
	Pod *corev1.Pod
	To  *Node
	// After is the time from the change until the agent was connected.
	After time.Duration
}

// WaitForRepin waits, for at most within, until the agent on the node of that name runs from a pod other than the one
// of UID old and is connected to a control-plane node's current address; since is when the addresses changed.
func (c Repins) WaitForRepin(ctx context.Context, name string, old types.UID, since time.Time, within time.Duration) (Repin, error) {
	var r Repin
	if c.nodes[name] == nil {
		return r, fmt.Errorf("no node %s", name)
	}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, within, true, func(context.Context) (bool, error) {
		if r.Pod = c.AgentPod(name); r.Pod == nil || r.Pod.UID == old {
			return false, nil
		}
		var err error
		r.To, err = c.Reconnects().ConnectedTo(name)
		return err == nil, nil
	})
	r.After = time.Since(since)
	if err != nil {
		peers, _ := c.nodes[name].APIServerPeers()
		pod := "none"
		if r.Pod != nil {
			pod = fmt.Sprintf("%s with hostAliases %v", r.Pod.Name, r.Pod.Spec.HostAliases)
		}
		return r, fmt.Errorf("the agent on %s was not re-pinned %s after the change: pod %s (was %s), connected to %v: %w",
			name, r.After.Round(time.Second), pod, old, peers, err)
	}
	return r, nil
}

// RunningPod waits, for at most within, until the agent on the node of that name runs from the node's pod of the
// agent DaemonSet (the one not terminating) and that pod is Ready, and returns the pod: what the node runs once the
// DaemonSet controller and the kubelet have caught up.
func (c Repins) RunningPod(ctx context.Context, name string, within time.Duration) (*corev1.Pod, error) {
	n := c.nodes[name]
	if n == nil {
		return nil, fmt.Errorf("no node %s", name)
	}
	var pod *corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, within, true, func(ctx context.Context) (bool, error) {
		var running bool
		pod, running = c.runningPod(ctx, n)
		return running, nil
	})
	last := "none"
	if pod != nil {
		last = pod.Name
	}
	if err != nil {
		return nil, fmt.Errorf("the agent on %s does not run from its DaemonSet's pod %s: %w", name, last, err)
	}
	return pod, nil
}
