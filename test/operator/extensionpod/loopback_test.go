// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package extensionpod_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/apiserverendpoints"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/cilium"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/ciliumchart"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/fixtures"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/podrun"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/testenv"
	"github.com/gardener/gardener-extension-cilium-selfhosted/webhook/apiserveraccess"
)

// listensOnLoopbackAlone: the pod's webhook server listens on its node's loopback, where the node's kube-apiserver
// calls it, and nowhere else. A neighbour on the node network and a pod of the node (network namespaces with a veth to
// the node, as a bare-metal peer and a Cilium pod have one) find the port closed on every address of the node, and
// while both flood every one of them, each admission of a Cilium agent pod through kube-apiserver comes back pinned:
// none fails open. The control: the same flood where kube-apiserver reaches the server, which a server listening on
// the node's address offered the network, makes admissions fail open.
func listensOnLoopbackAlone(t *testing.T, rendered *ciliumchart.Objects) {
	daemonSet := &appsv1.DaemonSet{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: testenv.ExtensionNamespace, Name: testenv.ServiceAccountName}, daemonSet); err != nil {
		t.Fatal(err)
	}
	port, err := podrun.WebhookServerPort(&daemonSet.Spec.Template.Spec)
	if err != nil {
		t.Fatal(err)
	}
	neighbour := attach(t, "neighbour", "10.0.21.100/24", "10.0.21.50/24")
	pod := attach(t, "pod", "100.64.21.1/30", "100.64.21.2/30")
	targets := []string{"10.0.21.100", "100.64.21.1", "10.0.20.100"}
	targets = append(targets, controlPlaneIPs...)
	for _, from := range []*podrun.Netns{neighbour, pod} {
		for _, ip := range targets {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			conn, err := from.DialContext(ctx, "tcp", net.JoinHostPort(ip, port))
			cancel()
			if err == nil {
				conn.Close()
				t.Errorf("from %s the webhook server answers at %s", from.Name(), net.JoinHostPort(ip, port))
			}
		}
	}

	template := ciliumchart.DaemonSetPod(rendered.Agent, "worker-0")
	cm := &corev1.ConfigMap{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: cilium.Namespace, Name: apiserverendpoints.ConfigMapName}, cm); err != nil {
		t.Fatal(err)
	}
	// admit creates n agent pods of worker-0 (dry runs) and counts those that came back not pinned to the control-plane
	// nodes: their admission failed open.
	admit := func(n int) (open int) {
		for range n {
			p := template.DeepCopy()
			if err := env.Client.Create(context.Background(), p, client.DryRunAll); err != nil {
				t.Fatal(err)
			}
			if len(ciliumchart.VerifyAdmitted(&p.Spec, &template.Spec, ciliumchart.WantByName(ciliumchart.GardenerVersion), fixtures.ControlPlaneIPs,
				map[string]map[string]string{cm.Name: cm.Data})) > 0 {
				open++
			}
		}
		return open
	}
	if open := admit(1); open != 0 {
		t.Fatal("an agent pod came back unpinned before any flood")
	}

	var i atomic.Int64
	f := startFlood(t, 32, 1000, 0, func(ctx context.Context) (net.Conn, error) {
		n := i.Add(1)
		return []*podrun.Netns{neighbour, pod}[n%2].DialContext(ctx, "tcp", net.JoinHostPort(targets[n%int64(len(targets))], port))
	})
	open := admit(10)
	f.stop()
	if open != 0 || f.connected.Load() != 0 {
		t.Errorf("%d of 10 admissions failed open while the node and pod networks flooded the webhook port (%d connections tried, %d accepted)", open, f.tried.Load(), f.connected.Load())
	}
	t.Logf("flood from the node and pod networks: %d connections tried, none accepted; 10 admissions, %d failed open", f.tried.Load(), open)

	// Each admission that fails open waits for kube-apiserver's timeout: the first one is enough. They run once every
	// attacker is connected. An attacker waits for a slot or holds one only about half of the time (one answered 503
	// is held another ReadTimeout while net/http drains its body): 32 kept about 16 waiting for the server's 8 slots,
	// and an admission often got one within kube-apiserver's 5 s (CI after session 33: twelve in a row did); 128 keep
	// the queue longer than 8 slots serve in that time.
	f = startFlood(t, 128, 0, 128, func(ctx context.Context) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "tcp", env.Extensions().WebhookAddress())
	})
	// Under load the attackers reconnect slowly after the server cuts them (its read timeout), and an admission may find
	// a slot meanwhile: admissions go on until one fails open, for a minute (make test r6 of session 29: ten in a row
	// found a slot).
	tried := 0
	err = testenv.WaitFor(context.Background(), time.Minute, func(context.Context) (bool, error) {
		tried++
		return admit(1) > 0, nil
	})
	f.stop()
	if err != nil {
		t.Errorf("no admission of %d failed open under the flood where kube-apiserver reaches the server: the flood proves nothing", tried)
	}
	t.Logf("the same flood where kube-apiserver reaches the server: admission %d failed open", tried)
}

// attach creates a network namespace name with a veth to the sandbox (the node): nodeAddress on the node's side,
// address on its own, and its default route through the node. It is deleted, with the veth, when t ends.
func attach(t *testing.T, name, nodeAddress, address string) *podrun.Netns {
	t.Helper()
	ns, err := podrun.NewNetns("cst-" + name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Delete)
	gateway, _, _ := net.ParseCIDR(nodeAddress)
	for _, args := range [][]string{
		{"link", "add", name, "type", "veth", "peer", "name", "peer", "netns", ns.Name()},
		{"addr", "add", nodeAddress, "dev", name}, {"link", "set", name, "up"},
	} {
		if err := sandbox.IP(args...); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{
		{"addr", "add", address, "dev", "peer"}, {"link", "set", "peer", "up"},
		{"route", "add", "default", "via", gateway.String()},
	} {
		if err := ns.IP(args...); err != nil {
			t.Fatal(err)
		}
	}
	return ns
}

// flood is a slowloris at work: each of its attackers connects through dial, sends an admission request's header
// and then one byte of its body a second, and connects again once the server gives up on it.
type flood struct {
	tried, connected atomic.Int64
	stop             func()
}

// startFlood starts a flood of attackers and waits until it has tried at least tried connections and made connected;
// t fails if it does not within a minute.
func startFlood(t *testing.T, attackers int, tried, connected int64, dial func(context.Context) (net.Conn, error)) *flood {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	f := &flood{}
	var running sync.WaitGroup
	f.stop = func() {
		cancel()
		running.Wait()
	}
	for range attackers {
		running.Go(func() {
			for ctx.Err() == nil {
				f.tried.Add(1)
				dialCtx, cancelDial := context.WithTimeout(ctx, time.Second)
				conn, err := dial(dialCtx)
				cancelDial()
				if err != nil {
					time.Sleep(10 * time.Millisecond)
					continue
				}
				f.connected.Add(1)
				trickle(ctx, tls.Client(conn, &tls.Config{InsecureSkipVerify: true})) //nolint:gosec // who serves is not what is tested
			}
		})
	}
	if err := testenv.WaitFor(ctx, time.Minute, func(context.Context) (bool, error) {
		return f.tried.Load() >= tried && f.connected.Load() >= connected, nil
	}); err != nil {
		f.stop()
		t.Fatalf("the flood never reached %d tries and %d connections: %v", tried, connected, err)
	}
	return f
}

// trickle sends an admission request's header on conn and then its body a byte a second, until ctx ends or the server
// gives up on it.
func trickle(ctx context.Context, conn *tls.Conn) {
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	if _, err := fmt.Fprintf(conn, "POST /%s HTTP/1.1\r\nHost: webhook\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{", apiserveraccess.AgentWebhookName); err != nil {
		return
	}
	for ctx.Err() == nil {
		if _, err := conn.Write([]byte(" ")); err != nil {
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}
