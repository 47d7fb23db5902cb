// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package ciliumnodes

import (
	"context"
	"fmt"
	"net"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Reconnect is how a worker's agent got over the death of the control-plane node whose kube-apiserver it was
// connected to.
type Reconnect struct {
	Worker, From, To string
	// After is the time from the death until the agent held a connection to another control-plane node.
	After time.Duration
	died  time.Time
}

// BlackHole kills the control-plane node that worker's agent is connected to, as death says: its agent killed, its link
// down or every packet it receives or sends dropped, so that nothing refuses a connection and nothing answers. It
// measures, for at most within, until the worker's agent holds a connection to another control-plane node's
// kube-apiserver. The dead node stays dead until the next Run.
//
// The node dies right after kube-apiserver sent the agent a frame over the connection: client-go's HTTP/2 health check
// counts its read-idle period from the last frame received, so a death after a quiet spell would be noticed that much
// sooner (with client-go's defaults, 30 s read-idle and a 15 s ping, between 15 and 45 s after the death).
func (c Reconnects) BlackHole(ctx context.Context, worker string, death Death, within time.Duration) (Reconnect, error) {
	r := Reconnect{Worker: worker}
	w, dead, err := c.workerConnection(ctx, worker, within)
	if err != nil {
		return r, err
	}
	r.From = dead.Name
	if err := c.sendToAgent(ctx, w, dead); err != nil {
		return r, err
	}
	c.disturb(dead.Name)
	if r.died, err = dead.die(death); err != nil {
		return r, err
	}
	return c.WaitForReconnect(ctx, r, within)
}

// WaitForReconnect waits, for at most within, until the agent of r's worker holds a connection to a control-plane
// node other than the one that died, and says after how long.
func (c Reconnects) WaitForReconnect(ctx context.Context, r Reconnect, within time.Duration) (Reconnect, error) {
	w := c.nodes[r.Worker]
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, within, true, func(context.Context) (bool, error) {
		if to, err := c.apiServerOf(w); err == nil && to.Name != r.From {
			r.To, r.After = to.Name, time.Since(r.died)
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		peers, _ := w.APIServerPeers()
		return r, fmt.Errorf("%s after %s died: the agent on %s is connected to %v: %w", time.Since(r.died).Round(time.Second), r.From, r.Worker, peers, err)
	}
	return r, nil
}

// sendToAgent makes kube-apiserver send the agent on w a watch event over its connection through via's kube-apiserver
// (an annotation of w's Node, which the agent watches) and waits until via's endpoint forwarded something to w.
func (c *Cluster) sendToAgent(ctx context.Context, w, via *Node) error {
	ep, ok := via.sandbox.Endpoint(via.IP + ":443")
	if !ok {
		return fmt.Errorf("%s serves no kube-apiserver at %s:443", via.Name, via.IP)
	}
	node := &corev1.Node{}
	if err := c.env.Client.Get(ctx, client.ObjectKey{Name: w.Name}, node); err != nil {
		return err
	}
	before := time.Now()
	patch := client.MergeFrom(node.DeepCopy())
	metav1.SetMetaDataAnnotation(&node.ObjectMeta, sentAnnotation, before.UTC().Format(time.RFC3339Nano))
	if err := c.env.Client.Patch(ctx, node, patch); err != nil {
		return err
	}
	if err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return ep.LastSentTo(w.IP).After(before), nil
	}); err != nil {
		return fmt.Errorf("kube-apiserver sent the agent on %s nothing through %s after its Node changed: %w", w.Name, via.Name, err)
	}
	return nil
}

// sentAnnotation is the Node annotation sendToAgent changes.
const sentAnnotation = "ciliumnodes.test/sent-to-agent"

// Disconnection is how a worker agent's connection to kube-apiserver ends while its control-plane node stays up.
type Disconnection string

const (
	// APIServerStopped: the node's kube-apiserver exits (a restart, a crash): its connections are closed and its port
	// refuses new ones.
	APIServerStopped Disconnection = "kube-apiserver stopped, node up"
	// ConnectionReset: the established connection is reset under the agent (an RST from a middlebox or a firewall that
	// dropped the flow) while kube-apiserver keeps serving.
	ConnectionReset Disconnection = "connection reset, kube-apiserver up"
)

// Disconnect ends the connection of the worker's agent to its control-plane node's kube-apiserver as how says, and
// measures, for at most within, until the agent holds a new connection: to another control-plane node when that
// kube-apiserver stopped (it is started again before Disconnect returns), to any when the connection was reset.
func (c Reconnects) Disconnect(ctx context.Context, worker string, how Disconnection, within time.Duration) (_ Reconnect, err error) {
	r := Reconnect{Worker: worker}
	w, from, err := c.workerConnection(ctx, worker, within)
	if err != nil {
		return r, err
	}
	r.From = from.Name
	accepted := c.acceptedFrom(w.IP)
	r.died = time.Now()
	switch how {
	case APIServerStopped:
		c.disturb(from.Name)
		if err := from.SwitchAPIServer(false); err != nil {
			return r, err
		}
		defer func() {
			if on := from.SwitchAPIServer(true); on != nil && err == nil {
				err = fmt.Errorf("starting %s's kube-apiserver again: %w", from.Name, on)
			}
		}()
	case ConnectionReset:
		ep, ok := from.sandbox.Endpoint(from.IP + ":443")
		if !ok {
			return r, fmt.Errorf("%s serves no kube-apiserver at %s:443", from.Name, from.IP)
		}
		ep.ResetConnections()
	default:
		return r, fmt.Errorf("unknown disconnection %q", how)
	}
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, within, true, func(context.Context) (bool, error) {
		to, err := c.apiServerOf(w)
		if err != nil || (how == APIServerStopped && to == from) || c.acceptedFrom(w.IP) == accepted {
			return false, nil
		}
		r.To, r.After = to.Name, time.Since(r.died)
		return true, nil
	})
	if err != nil {
		peers, _ := w.APIServerPeers()
		return r, fmt.Errorf("%s after %s (%s): the agent on %s is connected to %v: %w", time.Since(r.died).Round(time.Second), r.From, how, r.Worker, peers, err)
	}
	return r, nil
}

// acceptedFrom counts the connections the control-plane nodes' kube-apiservers accepted from ip.
func (c *Cluster) acceptedFrom(ip string) int {
	count := 0
	for _, n := range c.nodes {
		if ep, ok := n.sandbox.Endpoint(n.IP + ":443"); ok && n.ControlPlane {
			count += ep.From()[ip]
		}
	}
	return count
}

// workerConnection waits, for at most within, until the agent on the worker of that name holds one connection to a
// control-plane node's kube-apiserver (a connection it replaced may linger a moment), and returns the worker and
// that node.
func (c *Cluster) workerConnection(ctx context.Context, worker string, within time.Duration) (w, to *Node, err error) {
	if w = c.nodes[worker]; w == nil || w.ControlPlane {
		return nil, nil, fmt.Errorf("%s is no worker of the cluster", worker)
	}
	var last error
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, within, true, func(context.Context) (bool, error) {
		to, last = c.apiServerOf(w)
		return last == nil, nil
	}); err != nil {
		return nil, nil, fmt.Errorf("%w: %w", last, err)
	}
	return w, to, nil
}

// apiServerOf is the control-plane node whose kube-apiserver the agent on w is connected to, by its sockets.
func (c *Cluster) apiServerOf(w *Node) (*Node, error) {
	peers, err := w.APIServerPeers()
	if err != nil {
		return nil, err
	}
	if len(peers) != 1 {
		return nil, fmt.Errorf("the agent on %s is connected to %v, not to one kube-apiserver", w.Name, peers)
	}
	host, _, err := net.SplitHostPort(peers[0])
	if err != nil {
		return nil, err
	}
	if n := c.NodeByIP(host); n != nil && n.ControlPlane {
		return n, nil
	}
	return nil, fmt.Errorf("the agent on %s is connected to %s, which is no control-plane node", w.Name, peers[0])
}

// ConnectedTo is the control-plane node whose kube-apiserver the agent on the node of that name is connected to, by
// its sockets: an error unless it holds exactly one kube-apiserver connection, to a control-plane node's current
// address.
func (c Reconnects) ConnectedTo(name string) (*Node, error) {
	n := c.nodes[name]
	if n == nil {
		return nil, fmt.Errorf("no node %s", name)
	}
	return c.apiServerOf(n)
}
