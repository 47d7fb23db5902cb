// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

// Package image builds the extension's image as make image does, for this machine's architecture, and runs images
// with podman as a node's container runtime would, in storage of the suite's own.
package image

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	gcrv1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/gardener/gardener-extension-cilium-selfhosted/hack/image/ocilayout"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/reaper"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/repo"
)

// Buildah: the suites that build the image (Debian's buildah, which hack/setup.sh installs).
func Buildah() error { return program("buildah") }

// Podman: the suites that run an image (Debian's podman and runc, which hack/setup.sh installs).
func Podman() error {
	if err := program("podman"); err != nil {
		return err
	}
	return program("runc")
}

func program(name string) error {
	if _, err := exec.LookPath(name); err != nil {
		return fmt.Errorf("%s is missing: install Debian's %s (make setup)", name, name)
	}
	return nil
}

// Layout is an OCI layout that holds the extension's image index under Tag.
type Layout struct {
	Path, Tag string
	// Index is the index's digest.
	Index string
}

// ImageIndex is the layout's index tagged Tag.
func (l Layout) ImageIndex() (gcrv1.ImageIndex, error) { return ocilayout.TaggedIndex(l.Path, l.Tag) }

// Build builds the image of the checkout for this machine's architecture into the OCI layout dir/oci, with
// hack/image/build.sh as make image runs it: the binary is hack/build.sh's, which make test has built already.
// buildah keeps its storage under dir too, with the vfs driver, which mounts nothing on the machine.
func Build(ctx context.Context, dir string) (Layout, error) {
	top, err := repo.Root()
	if err != nil {
		return Layout{}, err
	}
	version, err := os.ReadFile(filepath.Join(top, "VERSION"))
	if err != nil {
		return Layout{}, err
	}
	l := Layout{Path: filepath.Join(dir, "oci"), Tag: strings.TrimSpace(string(version))}
	runRoot, err := os.MkdirTemp("/tmp", "buildah-")
	if err != nil {
		return l, err
	}
	defer os.RemoveAll(runRoot)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return l, err
	}
	storage := filepath.Join(dir, "storage.conf")
	if err := os.WriteFile(storage, fmt.Appendf(nil, "[storage]\ndriver = \"vfs\"\ngraphroot = %q\nrunroot = %q\n", filepath.Join(dir, "storage"), runRoot), 0o644); err != nil {
		return l, err
	}
	cmd := exec.CommandContext(ctx, filepath.Join(top, "hack/image/build.sh"))
	cmd.Dir = top
	cmd.Env = append(os.Environ(), "IMAGE_LAYOUT="+l.Path, "PLATFORMS=linux/"+runtime.GOARCH, "CONTAINERS_STORAGE_CONF="+storage)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return l, fmt.Errorf("hack/image/build.sh: %w\n%s", err, stderr.String())
	}
	for line := range strings.Lines(string(out)) {
		if digest, ok := strings.CutPrefix(strings.TrimSpace(line), "index "); ok {
			l.Index = digest
		}
	}
	if l.Index == "" {
		return l, fmt.Errorf("hack/image/build.sh printed no index digest:\n%s", out)
	}
	return l, nil
}

// Runtime is podman with image storage of its own, run as on this machine it must be: runc (crun fails on this
// kernel's cgroup v1/v2 hybrid), cgroupfs, ulimits at or below the machine's. It changes nothing that the suites
// running beside it check the machine for (test/framework/ciliumnodes Leftovers): the vfs storage driver mounts no
// overlay, its containers' cgroups lie below the reaper's base cgroup instead of libpod_parent in the cgroup2 root,
// and they get no network and no /dev/shm mount.
type Runtime struct {
	// root holds the images, runRoot the containers' state (podman takes at most 50 characters for it).
	root, runRoot string
	// Env is added to podman's environment (CONTAINERS_REGISTRIES_CONF, say).
	Env []string
}

// NewRuntime returns a runtime whose storage lies under dir and a short folder in /tmp.
func NewRuntime(dir string) (Runtime, error) {
	runRoot, err := os.MkdirTemp("/tmp", "podman-")
	if err != nil {
		return Runtime{}, err
	}
	return Runtime{root: filepath.Join(dir, "root"), runRoot: runRoot}, nil
}

// Command is podman with args, on the runtime's storage.
func (r Runtime) Command(ctx context.Context, args ...string) *exec.Cmd {
	// libpod's tmpdir too: the machine's /run/libpod is shared by every podman, which a suite beside may be running.
	global := []string{"--root", r.root, "--runroot", r.runRoot, "--tmpdir", filepath.Join(r.runRoot, "libpod"),
		"--storage-driver", "vfs", "--runtime", "runc", "--cgroup-manager", "cgroupfs"}
	cmd := exec.CommandContext(ctx, "podman", append(global, args...)...)
	cmd.Env = append(os.Environ(), r.Env...)
	return cmd
}

// CgroupParent is where the runtime's containers' cgroups go: below the reaper's base cgroup, which the suites'
// machine checks expect, not podman's libpod_parent in the cgroup2 root.
var CgroupParent = "/" + reaper.BaseCgroup + "/podman"

// Run runs the image ref with args, without network, and returns what it printed.
func (r Runtime) Run(ctx context.Context, ref string, args ...string) (string, error) {
	run := []string{"run", "--rm", "--network", "none", "--ipc", "none", "--cgroup-parent", CgroupParent,
		"--ulimit", "nproc=4096:4096", "--ulimit", "nofile=4096:4096", ref}
	return r.Output(ctx, append(run, args...)...)
}

// Pull pulls ref over plain HTTP, as a node's containerd does from a registry its hosts.toml names with an http://
// server.
func (r Runtime) Pull(ctx context.Context, ref string) error {
	_, err := r.Output(ctx, "pull", "--quiet", "--tls-verify=false", ref)
	return err
}

// Load stores the layout's image for this machine's architecture under name, as a node holds a pulled image.
func (r Runtime) Load(ctx context.Context, l Layout, name string) error {
	id, err := r.Output(ctx, "pull", "--quiet", "oci:"+l.Path+":"+l.Tag)
	if err != nil {
		return err
	}
	_, err = r.Output(ctx, "tag", strings.TrimSpace(id), name)
	return err
}

// Output runs podman with args and returns its standard output; on failure, the error holds what it said.
func (r Runtime) Output(ctx context.Context, args ...string) (string, error) {
	cmd := r.Command(ctx, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("podman %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out), nil
}

// Reset removes the runtime's storage: vfs mounts nothing, so removing its folders is all (podman system reset would
// also empty the machine's /run/libpod under another suite's podman).
func (r Runtime) Reset() error {
	return errors.Join(os.RemoveAll(r.root), os.RemoveAll(r.runRoot))
}
