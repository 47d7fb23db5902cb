// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package podrun

import (
	"context"
	"fmt"
	"net"
	"net/url"

	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/ciliumchart"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/fixtures"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/testenv"
)

// ClusterIP is the `kubernetes` Service's ClusterIP in testenv's Service CIDR; kube-apiserver's certificate holds it.
const ClusterIP = "10.96.0.1"

// ShootCertificates are the certificates for a suite whose Cilium runs in namespaces (which needs root), for
// testenv.Options: kube-apiserver serves a certificate made as Gardener makes it for the self-hosted shoot
// technicalID, holding ClusterIP.
func ShootCertificates(technicalID string) (*testenv.Certificates, error) {
	if err := testenv.Root(); err != nil {
		return nil, err
	}
	return testenv.NewGardenerCertificates(technicalID, "shoot.example.com", net.ParseIP(ClusterIP))
}

// NewShootSandbox gives the fixture nodes of env their fixture InternalIPs (a test may have moved them) and creates the
// sandbox of the shoot: the control-plane nodes' addresses (fixtures.ControlPlaneIPs) on its loopback, forwarding to
// env's kube-apiserver, and the exposure VIP fixtures.ExposureVIP, which the external name of the charts resolves to.
func NewShootSandbox(ctx context.Context, env *testenv.Env, name string) (*Sandbox, error) {
	for name, ip := range fixtures.InternalIPs() {
		if err := env.SetInternalIP(ctx, name, ip); err != nil {
			return nil, err
		}
	}
	apiServer, err := url.Parse(env.Config.Host)
	if err != nil || apiServer.Scheme != "https" {
		return nil, fmt.Errorf("kube-apiserver at %q, not an https URL: %v", env.Config.Host, err)
	}
	return NewSandbox(Network{
		Name: name, APIServer: apiServer.Host, ControlPlaneIPs: fixtures.ControlPlaneIPs,
		ClusterIP: ClusterIP, VIP: fixtures.ExposureVIP, ExternalName: ciliumchart.ExternalHost,
	})
}
