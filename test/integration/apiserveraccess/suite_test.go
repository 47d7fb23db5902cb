// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

// Package apiserveraccess_test runs the extension (the same command and flags as in production) against a real
// kube-apiserver and checks that Cilium's objects come back from the API server pinned to the control plane.
package apiserveraccess_test

import (
	"os"
	"testing"

	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/fixtures"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	os.Exit(testenv.RunSuite(m, fixtures.Shoot(true), testenv.Options{}, testenv.Use(&env)))
}
