package ciliumnodes

import (
	"context"
	"fmt"
	"net"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
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
func (c *Cluster) BlackHole(ctx context.Context, worker string, death Death, within time.Duration) (Reconnect, error) {
	r := Reconnect{Worker: worker}
	w := c.nodes[worker]
	if w == nil || w.ControlPlane {
		return r, fmt.Errorf("%s is no worker of the cluster", worker)
	}
	dead, err := c.apiServerOf(w)
	if err != nil {
		return r, err
	}
	r.From = dead.Name
	c.disturb(dead.Name)
	if r.died, err = dead.die(death); err != nil {
		return r, err
	}
	return c.WaitForReconnect(ctx, r, within)
}

// WaitForReconnect waits, for at most within, until the agent of r's worker holds a connection to a control-plane
// node other than the one that died, and says after how long.
func (c *Cluster) WaitForReconnect(ctx context.Context, r Reconnect, within time.Duration) (Reconnect, error) {
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
