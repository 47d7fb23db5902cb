// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

// Package connect starts Cilium's real operator and the agent's `cilium-dbg build-config` exactly as the pods the
// webhook admitted would run them (test/framework/podrun), against a kube-apiserver that serves a certificate generated as
// Gardener generates it for a self-hosted shoot (no node IP), and checks which kube-apiserver address each reaches and
// that the certificate verifies.
package connect

import (
	"context"
	"os"
	"strconv"
	"testing"

	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/ciliumbin"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/ciliumchart"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/fixtures"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/podrun"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/testenv"
)

var (
	envtest *testenv.Env
	sandbox *podrun.Sandbox
)

func TestMain(m *testing.M) {
	if err := testenv.Check(testenv.Root, ciliumchart.GardenerChart, ciliumbin.Built(ciliumbin.Operator, ciliumbin.Dbg)); err != nil {
		os.Exit(testenv.CannotRun(err))
	}
	certs, err := podrun.ShootCertificates("shoot--local--connect")
	if err != nil {
		os.Exit(testenv.CannotRun(err))
	}
	os.Exit(testenv.RunSuite(m, fixtures.Shoot(true), testenv.Options{Certificates: certs}, setup))
}

func setup(ctx context.Context, e *testenv.Env) (func(), error) {
	envtest = e
	var err error
	if sandbox, err = podrun.NewShootSandbox(ctx, e, "cilium-connect-"+strconv.Itoa(os.Getpid())); err != nil {
		return nil, err
	}
	return sandbox.Close, nil
}
