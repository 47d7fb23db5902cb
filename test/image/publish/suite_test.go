// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

// Package publish is the suite of the registry path: the image make image builds and the chart, published with make
// push to a real registry (Debian's docker-registry on 127.0.0.1), the chart pulled through Gardener's HelmRegistry
// and rendered as gardenlet's ControllerInstallation reconciler renders it for a self-hosted shoot, and the image its
// DaemonSet names pulled by digest and run with podman.
package publish

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/image"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/registry"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/testenv"
)

var (
	// layout is the image make image builds, for this machine's architecture.
	layout image.Layout
	// reg is the registry the cases push to, each to repositories of its own.
	reg *registry.Registry
	// podman pulls and runs images in storage of the suite's own.
	podman image.Runtime
)

func TestMain(m *testing.M) {
	if err := testenv.Check(image.Buildah, image.Podman, registry.Available); err != nil {
		os.Exit(testenv.CannotRun(err))
	}
	code := run(m)
	testenv.PrintCPU()
	os.Exit(code)
}

func run(m *testing.M) int {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "publish-")
	if err != nil {
		return testenv.CannotRun(err)
	}
	defer os.RemoveAll(dir)
	if layout, err = image.Build(ctx, filepath.Join(dir, "build")); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if reg, err = registry.Start(ctx, filepath.Join(dir, "registry")); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer reg.Stop(ctx)
	if podman, err = image.NewRuntime(filepath.Join(dir, "podman")); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = podman.Reset() }()
	return m.Run()
}
