// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

// Package selfhostedshootexposure_test runs the extension against a real kube-apiserver with Gardener's and Cilium's
// CRDs and checks the whole life of a cilium SelfHostedShootExposure, with a helper that plays Cilium's LB-IPAM.
package selfhostedshootexposure_test

import (
	"os"
	"testing"

	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/ciliumchart"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/ciliumfake"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/fixtures"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	shoot := fixtures.WithExposureConfig(fixtures.Shoot(true), fixtures.ExposureConfigL2)
	os.Exit(testenv.RunSuite(m, shoot, testenv.Options{Prerequisites: []testenv.Prerequisite{ciliumchart.GardenerChart}}, ciliumfake.Use(&env)))
}

// ciliumVersion is the chart whose cilium-config the suite installs.
const ciliumVersion = "1.19.7"
