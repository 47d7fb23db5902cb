// Package connect starts Cilium's real operator exactly as the pods the webhook admitted would run it, against a
// kube-apiserver that serves a certificate generated as Gardener generates it for a self-hosted shoot (no node IP),
// and checks which kube-apiserver address it reaches and that the certificate verifies.
//
// The operator runs in a network namespace of the test's own with only a loopback interface, which stands for the
// node: 127.0.0.2-127.0.0.4 are the control-plane nodes' InternalIPs (each a proxy to the test's kube-apiserver that
// can be switched off), 127.0.0.1:443 is the local kube-apiserver of a control-plane node, and the `kubernetes`
// ClusterIP and the exposure VIP (which the external name resolves to) are traps that count who dials them. Nothing it
// dials leaves the namespace. Each run gets a private mount namespace with what kubelet would give the container: the
// service-account token and CA, /etc/hosts with the pod's hostAliases, `cilium-config` as config directory and the
// endpoints ConfigMap's kubeconfig.
package connect

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gardener/gardener-extension-cilium-selfhosted/test/fixtures"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/testenv"
)

const (
	// clusterIP is the `kubernetes` ClusterIP of testenv's Service CIDR.
	clusterIP = "10.96.0.1"
	// vip is the exposure VIP that the external name resolves to; TEST-NET-3, and only ever inside the namespace.
	vip = "203.0.113.10"
	// externalName is the shoot's external API name, which the Cilium chart is rendered with.
	externalName = "api.shoot.example.com"
)

// controlPlaneIPs stand for the InternalIPs of the control-plane nodes cp-0, cp-1 and cp-2.
var controlPlaneIPs = []string{"127.0.0.2", "127.0.0.3", "127.0.0.4"}

var (
	env *testenv.Env
	ns  *netns
	// endpoints are the addresses inside the namespace, by address:port.
	endpoints = map[string]*endpoint{}
)

func TestMain(m *testing.M) {
	if os.Getuid() != 0 {
		fmt.Fprintln(os.Stderr, "the connect suite needs root for network and mount namespaces")
		os.Exit(1)
	}
	certs, err := testenv.NewGardenerCertificates("shoot--local--connect", "shoot.example.com", net.ParseIP(clusterIP))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	testenv.GardenerCertificates = certs
	os.Exit(testenv.RunSuite(m, fixtures.Shoot(true), setup))
}

func setup(ctx context.Context, e *testenv.Env) (func(), error) {
	env = e
	// The fixture's nodes, with loopback InternalIPs that the namespace serves.
	for i, ip := range controlPlaneIPs {
		if err := setInternalIP(ctx, "cp-"+strconv.Itoa(i), ip); err != nil {
			return nil, err
		}
	}
	for i := range 2 {
		if err := setInternalIP(ctx, "worker-"+strconv.Itoa(i), "127.0.1."+strconv.Itoa(i+1)); err != nil {
			return nil, err
		}
	}

	apiServer, err := urlHost(env.Config.Host)
	if err != nil {
		return nil, err
	}
	if ns, err = newNetns("cilium-connect-"+strconv.Itoa(os.Getpid()), clusterIP+"/32", vip+"/32"); err != nil {
		return nil, err
	}
	addresses := map[string]string{"127.0.0.1:443": apiServer, clusterIP + ":443": "", vip + ":443": ""}
	for _, ip := range controlPlaneIPs {
		addresses[ip+":443"] = apiServer
	}
	for addr, forward := range addresses {
		ep := &endpoint{addr: addr, forward: forward, ns: ns}
		if err := ep.start(); err != nil {
			ns.delete()
			return nil, fmt.Errorf("listening on %s in the namespace: %w", addr, err)
		}
		endpoints[addr] = ep
	}
	return func() {
		for _, ep := range endpoints {
			ep.stop()
		}
		ns.delete()
	}, nil
}

func setInternalIP(ctx context.Context, name, ip string) error {
	node := &corev1.Node{}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: name}, node); err != nil {
		return err
	}
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}, {Type: corev1.NodeHostName, Address: name}}
	return env.Client.Status().Update(ctx, node)
}
