// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

// Package staleaddress replaces this replica's own pod once its node no longer has the pod's address: kubelet keeps a
// host-network pod's IPs as they were when it started, and only a new pod gets the node's new address
// (docs/operations/failure-modes.md, "A control-plane node changed its address or was replaced").
package staleaddress

import (
	"context"
	"errors"
	"net"
	"slices"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// Name names the replacer in logs.
const Name = "stale-pod-address"

// Interval is how often the host's addresses are looked at; the pod goes at the second look in a row that misses its
// address, so that an address being moved is not taken for a lost one.
const Interval = 5 * time.Second

// Pod is this replica's pod, from the downward API.
type Pod struct {
	Name, Namespace string
	UID             types.UID
	IP, Node        string
}

// Complete says whether the pod is known well enough to be replaced.
func (p Pod) Complete() bool {
	return p.Name != "" && p.Namespace != "" && p.UID != "" && p.IP != "" && p.Node != ""
}

// HostAddresses are the addresses of the host's interfaces: the extension runs in the host network.
var HostAddresses = net.InterfaceAddrs

// Stale says whether ip is none of addrs' addresses.
func Stale(ip string, addrs []net.Addr) bool {
	want := net.ParseIP(ip)
	return !slices.ContainsFunc(addrs, func(a net.Addr) bool {
		n, ok := a.(*net.IPNet)
		return ok && n.IP.Equal(want)
	})
}

// Replacer deletes Pod once the host has lost its address.
type Replacer struct {
	Pod    Pod
	Writer client.Writer
	Log    logr.Logger
	// Addresses are the host's addresses (HostAddresses).
	Addresses func() ([]net.Addr, error)

	missed int
}

// NeedLeaderElection implements manager.LeaderElectionRunnable: every replica looks after its own pod.
func (*Replacer) NeedLeaderElection() bool { return false }

// Start implements manager.Runnable.
func (r *Replacer) Start(ctx context.Context) error {
	wait.UntilWithContext(ctx, r.look, Interval)
	return nil
}

func (r *Replacer) look(ctx context.Context) {
	addrs, err := r.Addresses()
	if err != nil {
		r.Log.Error(err, "Reading the host's addresses failed")
		return
	}
	if !Stale(r.Pod.IP, addrs) {
		r.missed = 0
		return
	}
	if r.missed++; r.missed < 2 {
		return
	}
	if err := Replace(ctx, r.Writer, r.Pod, r.Log); err != nil {
		r.Log.Error(err, "Deleting this replica's pod failed", "pod", r.Pod.Namespace+"/"+r.Pod.Name)
	}
}

// Replace deletes pod (that very pod: a precondition on its UID), so that the DaemonSet controller makes one with the
// node's current address.
func Replace(ctx context.Context, c client.Writer, pod Pod, log logr.Logger) error {
	log.Info("The host no longer has this replica's pod address; deleting the pod, so that the DaemonSet makes one with the node's address",
		"pod", pod.Namespace+"/"+pod.Name, "podIP", pod.IP, "node", pod.Node)
	obj := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name}}
	return client.IgnoreNotFound(c.Delete(ctx, obj, client.Preconditions{UID: &pod.UID}))
}

// ErrStale is what the extension ends with when it started in a pod whose address the host no longer has.
var ErrStale = errors.New("the host no longer has this pod's address; the pod was deleted for the DaemonSet to replace it")

// ReplaceIfStale deletes pod and returns ErrStale when the host does not have its address, before the extension binds
// its servers to it: a process that cannot bind would never get to replace its pod.
func ReplaceIfStale(ctx context.Context, c client.Writer, pod Pod, log logr.Logger) error {
	if !pod.Complete() {
		return nil
	}
	addrs, err := HostAddresses()
	if err != nil || !Stale(pod.IP, addrs) {
		return err
	}
	if err := Replace(ctx, c, pod, log); err != nil {
		return err
	}
	return ErrStale
}

// AddToManager adds the replacer of pod to mgr, unless pod is incomplete (run outside a pod).
func AddToManager(mgr manager.Manager, pod Pod) error {
	log := mgr.GetLogger().WithName(Name)
	if !pod.Complete() {
		log.Info("Not run from a pod (--pod-name, --pod-namespace, --pod-uid, --pod-ip, --node-name): nothing replaces it when its node's address changes")
		return nil
	}
	return mgr.Add(&Replacer{Pod: pod, Writer: mgr.GetClient(), Log: log, Addresses: HostAddresses})
}
