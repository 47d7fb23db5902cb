// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

// Package beforecilium_test starts the extension on a self-hosted shoot before Cilium is installed, as gardenadm
// does: Cilium's CRDs come only later, with cilium-operator. The webhook must serve from the start, and exposures
// must work once the CRDs are there.
package beforecilium_test

import (
	"os"
	"testing"

	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/ciliumfake"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/fixtures"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	shoot := fixtures.WithExposureConfig(fixtures.Shoot(true), fixtures.ExposureConfigL2)
	os.Exit(testenv.RunSuite(m, shoot, testenv.Options{WithoutCiliumCRDs: true}, ciliumfake.Use(&env)))
}
