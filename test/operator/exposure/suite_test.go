// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

// Package exposure runs the extension binary with its production flags next to Cilium's real operator (LB-IPAM, BGP
// control plane) against the envtest control plane, with Gardener's and Cilium's CRDs and a self-hosted shoot of 3
// control-plane and 2 worker nodes.
package exposure

import (
	"context"
	"os"
	"testing"

	ciliumv2 "github.com/cilium/cilium/pkg/k8s/apis/cilium.io/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/ciliumbin"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/ciliumchart"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/ciliumfake"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/ciliumoperator"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/fixtures"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/testenv"
)

var (
	env      *testenv.Env
	operator *ciliumoperator.Operator
)

// ciliumVersion is the chart whose cilium-config the suite installs: the release Gardener's networking-cilium ships,
// and the one the operator is built from.
const ciliumVersion = "1.19.7"

func TestMain(m *testing.M) {
	shoot := fixtures.WithExposureConfig(fixtures.Shoot(true), fixtures.ExposureConfigL2)
	os.Exit(testenv.RunSuite(m, shoot, testenv.Options{Prerequisites: []testenv.Prerequisite{ciliumbin.Built(ciliumbin.Operator)}}, setup))
}

// unannounced is the exposure whose VIP nobody announces until its test says so.
const unannounced = "unannounced"

// setup installs Cilium's configuration (with the BGP control plane on, as an operator of BGP would have it) and a
// CiliumNode per Node, as the agents would create them, and starts the operator.
func setup(ctx context.Context, e *testenv.Env) (func(), error) {
	env = e
	rendered, err := ciliumchart.Render(ciliumVersion, ciliumchart.Values(ciliumVersion))
	if err != nil {
		return nil, err
	}
	config := rendered.Config.DeepCopy()
	config.Data["enable-bgp-control-plane"] = "true"
	if err := env.Client.Create(ctx, config); err != nil {
		return nil, err
	}
	for _, node := range fixtures.Nodes() {
		ciliumNode := &ciliumv2.CiliumNode{ObjectMeta: metav1.ObjectMeta{Name: node.Name, Labels: node.Labels}}
		if err := env.Client.Create(ctx, ciliumNode); err != nil {
			return nil, err
		}
	}
	if operator, err = ciliumoperator.Start(ctx, env, nil); err != nil {
		return nil, err
	}
	// No agents run here: cp-0's is played as the VIP's announcer, except for the exposure that shows what happens
	// without one.
	ctx, cancel := context.WithCancel(ctx)
	go ciliumfake.Announcer(ctx, env.Client, "cp-0", unannounced)
	return func() { cancel(); operator.Stop(context.Background()) }, nil
}
