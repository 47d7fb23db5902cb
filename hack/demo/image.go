// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"path/filepath"
	"runtime"
	"sync"

	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/fixtures"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/image"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/testenv"
)

// extensionFromImage builds the extension's image as make image does (this machine's architecture), runs it as its
// chart's pod on cp-0 in the nodes' network with podman (test/framework/podrun: the pod's token, CA and security
// context) and hands it the webhooks and the controllers until giveBack. Without root, buildah or podman it says so,
// and the extension keeps running as a process. giveBack may be called more than once.
func (d *demo) extensionFromImage(ctx context.Context) (giveBack func() error, err error) {
	keep := func() error { return nil }
	if d.sandbox == nil {
		step("Not root: the extension keeps running as a process, not from its image")
		return keep, nil
	}
	if err := testenv.Check(image.Buildah, image.Podman); err != nil {
		step("%v: the extension keeps running as a process, not from its image", err)
		return keep, nil
	}
	step("Building the extension's image as make image does (linux/%s only) and running it with podman as its chart's pod on "+
		"cp-0 (%s), in the nodes' network, with the pod's token and CA and the chart's security context", runtime.GOARCH, fixtures.ControlPlaneIPs[0])
	dir := filepath.Join(d.env.Dir, "extension-image")
	built, podman, err := d.sandbox.UseExtensionImage(ctx, dir)
	if err != nil {
		return nil, err
	}
	pod, back, err := d.sandbox.TakeOver(ctx, d.env, "cp-0", fixtures.ControlPlaneIPs[0], dir, filepath.Join(d.env.Dir, "extension-pod.log"))
	if err != nil {
		return nil, err
	}
	step("   image %s:%s (index %s) in container %s: ready; the process stopped, so the pod leads and kube-apiserver calls its webhooks",
		testenv.ImageRepository, built.Tag, built.Index, pod.Container)
	return sync.OnceValue(func() error {
		err := back()
		_ = podman.Reset()
		return err
	}), nil
}
