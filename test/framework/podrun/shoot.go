package podrun

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strconv"

	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/ciliumchart"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/fixtures"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/testenv"
)

// ClusterIP is the `kubernetes` Service's ClusterIP in testenv's Service CIDR; kube-apiserver's certificate holds it.
const ClusterIP = "10.96.0.1"

// ControlPlaneIPs are the InternalIPs NewShootSandbox gives the fixture control-plane nodes cp-0, cp-1 and cp-2.
var ControlPlaneIPs = []string{"127.0.0.2", "127.0.0.3", "127.0.0.4"}

// ShootCertificates are the certificates for a suite whose Cilium runs in namespaces (which needs root), for
// testenv.Options: kube-apiserver serves a certificate made as Gardener makes it for the self-hosted shoot
// technicalID, holding ClusterIP.
func ShootCertificates(technicalID string) (*testenv.Certificates, error) {
	if err := testenv.Root(); err != nil {
		return nil, err
	}
	return testenv.NewGardenerCertificates(technicalID, "shoot.example.com", net.ParseIP(ClusterIP))
}

// NewShootSandbox gives the fixture nodes of env loopback InternalIPs (ControlPlaneIPs for the control plane, which
// the sandbox forwards to env's kube-apiserver; 127.0.1.x for the workers, where nothing listens) and creates the
// sandbox of the shoot: the exposure VIP fixtures.ExposureVIP, which the external name of the charts resolves to.
func NewShootSandbox(ctx context.Context, env *testenv.Env, name string) (*Sandbox, error) {
	for i, ip := range ControlPlaneIPs {
		if err := env.SetInternalIP(ctx, "cp-"+strconv.Itoa(i), ip); err != nil {
			return nil, err
		}
	}
	for i := range 2 {
		if err := env.SetInternalIP(ctx, "worker-"+strconv.Itoa(i), "127.0.1."+strconv.Itoa(i+1)); err != nil {
			return nil, err
		}
	}
	apiServer, err := url.Parse(env.Config.Host)
	if err != nil || apiServer.Scheme != "https" {
		return nil, fmt.Errorf("kube-apiserver at %q, not an https URL: %v", env.Config.Host, err)
	}
	return NewSandbox(Network{
		Name: name, APIServer: apiServer.Host, ControlPlaneIPs: ControlPlaneIPs,
		ClusterIP: ClusterIP, VIP: fixtures.ExposureVIP, ExternalName: ciliumchart.ExternalHost,
	})
}
