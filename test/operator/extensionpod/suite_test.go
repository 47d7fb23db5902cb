// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

// Package extensionpod_test runs the extension's image, as make image builds it, as the pod of its chart would run on
// cp-0 (test/framework/podrun with podman: in a network namespace standing for the node, with its ServiceAccount's
// token and the cluster CA, the container's security context), against a real kube-apiserver that serves a
// certificate made as Gardener makes it and Cilium's real operator (LB-IPAM). kube-apiserver calls the pod's webhook
// server through a route into the namespace. The namespace holds the three control-plane InternalIPs, each a TCP
// proxy to kube-apiserver that the tests switch off, as a control-plane node whose kube-apiserver is down refuses
// connections; nothing the extension dials leaves the namespace. A helper plays cp-0's agent as the VIP's announcer.
package extensionpod_test

import (
	"context"
	"net/url"
	"os"
	"strconv"
	"testing"

	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/ciliumbin"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/ciliumchart"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/ciliumfake"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/ciliumoperator"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/fixtures"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/image"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/podrun"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/testenv"
)

var (
	env     *testenv.Env
	sandbox *podrun.Sandbox
	// node is cp-0's container runtime, holding the image make image built under the chart's name; built the image's
	// index.
	node  image.Runtime
	built image.Layout
	// controlPlaneIPs are cp-0, cp-1 and cp-2's InternalIPs, on the sandbox's loopback.
	controlPlaneIPs = fixtures.ControlPlaneIPs
)

// uplinkAddress and gateway are the node's address in the node network and the network's router, on its uplink.
const (
	uplinkAddress = "10.0.20.100/24"
	gateway       = "10.0.20.254"
)

func TestMain(m *testing.M) {
	if err := testenv.Check(testenv.Root, testenv.Kubectl, image.Buildah, image.Podman, ciliumchart.GardenerChart, ciliumbin.Built(ciliumbin.Operator)); err != nil {
		os.Exit(testenv.CannotRun(err))
	}
	certs, err := podrun.ShootCertificates("shoot--local--health")
	if err != nil {
		os.Exit(testenv.CannotRun(err))
	}
	shoot := fixtures.WithExposureConfig(fixtures.Shoot(true), fixtures.ExposureConfigL2)
	os.Exit(testenv.RunSuite(m, shoot, testenv.Options{Certificates: certs}, setup))
}

func setup(ctx context.Context, e *testenv.Env) (func(), error) {
	env = e
	// Cilium's configuration as Gardener's chart makes it, which the exposures check, and the operator's LB-IPAM.
	if err := ciliumchart.CreateGardenerConfig(ctx, e.Client); err != nil {
		return nil, err
	}
	operator, err := ciliumoperator.Start(ctx, e, nil)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	go ciliumfake.Announcer(ctx, e.Client, "cp-0")
	stopCilium := func() {
		cancel()
		operator.Stop(context.Background())
	}
	apiServer, err := url.Parse(e.Config.Host)
	if err != nil {
		stopCilium()
		return nil, err
	}
	sandbox, err = podrun.NewSandbox(podrun.Network{
		Name: "cilium-pod-" + strconv.Itoa(os.Getpid()), APIServer: apiServer.Host, ControlPlaneIPs: controlPlaneIPs,
		ClusterIP: podrun.ClusterIP, VIP: fixtures.ExposureVIP, ExternalName: ciliumchart.ExternalHost,
	})
	if err != nil {
		stopCilium()
		return nil, err
	}
	cleanup := func() {
		sandbox.Close()
		stopCilium()
	}
	// The image of the chart's DaemonSet, as cp-0 holds it once pulled.
	if built, node, err = sandbox.UseExtensionImage(ctx, e.Dir); err != nil {
		cleanup()
		return nil, err
	}
	cleanup = func() {
		sandbox.Close()
		_ = node.Reset()
		stopCilium()
	}
	// The node's uplink, as a bare-metal node has one: its address in the node network and the default route through
	// the network's router. A veth whose peer stays down in the same namespace, so that whatever is routed there is
	// dropped and never leaves.
	for _, args := range [][]string{
		{"link", "add", "uplink", "type", "veth", "peer", "name", "uplink-peer"}, {"addr", "add", uplinkAddress, "dev", "uplink"},
		{"link", "set", "uplink", "up"},
		{"route", "add", "default", "via", gateway, "dev", "uplink"},
	} {
		if err := sandbox.IP(args...); err != nil {
			cleanup()
			return nil, err
		}
	}
	return cleanup, nil
}
