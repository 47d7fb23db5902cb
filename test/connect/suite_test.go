// Package connect starts Cilium's real operator and the agent's `cilium-dbg build-config` exactly as the pods the
// webhook admitted would run them (test/podrun), against a kube-apiserver that serves a certificate generated as
// Gardener generates it for a self-hosted shoot (no node IP), and checks which kube-apiserver address each reaches and
// that the certificate verifies.
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
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/podrun"
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
	envtest *testenv.Env
	sandbox *podrun.Sandbox
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
	envtest = e
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

	apiServer, err := urlHost(envtest.Config.Host)
	if err != nil {
		return nil, err
	}
	if sandbox, err = podrun.NewSandbox(podrun.Network{
		Name: "cilium-connect-" + strconv.Itoa(os.Getpid()), APIServer: apiServer, ControlPlaneIPs: controlPlaneIPs,
		ClusterIP: clusterIP, VIP: vip, ExternalName: externalName,
	}); err != nil {
		return nil, err
	}
	return sandbox.Close, nil
}

func setInternalIP(ctx context.Context, name, ip string) error {
	node := &corev1.Node{}
	if err := envtest.Client.Get(ctx, client.ObjectKey{Name: name}, node); err != nil {
		return err
	}
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}, {Type: corev1.NodeHostName, Address: name}}
	return envtest.Client.Status().Update(ctx, node)
}
