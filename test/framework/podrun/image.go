// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package podrun

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/image"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/testenv"
)

// UseImages makes Start run the containers of refs from their images with podman (rt), instead of the binary on the
// machine: the exact image a node pulls, which rt holds under the name the pod gives it. Containers of other images
// still run from the binaries.
func (s *Sandbox) UseImages(rt image.Runtime, refs ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.images, s.imageRefs = &rt, refs
}

// UseExtensionImage builds the extension's image as make image does (this machine's architecture) under dir, loads it
// into a podman runtime of its own there under the name the chart gives it (testenv.ImageRepository and VERSION), as a
// node holds it once pulled, and makes s run the extension's containers from it (UseImages). The caller resets the
// runtime.
func (s *Sandbox) UseExtensionImage(ctx context.Context, dir string) (image.Layout, image.Runtime, error) {
	built, err := image.Build(ctx, filepath.Join(dir, "image"))
	if err != nil {
		return built, image.Runtime{}, err
	}
	rt, err := image.NewRuntime(filepath.Join(dir, "podman"))
	if err != nil {
		return built, rt, err
	}
	ref := testenv.ImageRepository + ":" + built.Tag
	if err := rt.Load(ctx, built, ref); err != nil {
		return built, rt, errors.Join(err, rt.Reset())
	}
	s.UseImages(rt, ref)
	return built, rt, nil
}

// startImage runs the container from its image with podman, as kubelet and a container runtime run it on a node: in
// the sandbox's network namespace (hostNetwork), with the pod's environment, the ServiceAccount token, CA and
// namespace at kubelet's path, its ConfigMap and emptyDir volumes, kubelet's hosts file, and the container's security
// context: user and group, read-only root filesystem, capabilities, no privilege escalation.
func (s *Sandbox) startImage(rt image.Runtime, c Container, container corev1.Container) (*Started, error) {
	if err := writeScratch(c); err != nil {
		return nil, err
	}
	if err := writeFiles(c.Dir, map[string]string{"hosts": s.hostsFile(c.Pod)}); err != nil {
		return nil, err
	}
	name := fmt.Sprintf("%s-%s-%d", c.Pod.Name, c.Name, os.Getpid())
	args := []string{"run", "--rm", "--name", name, "--pull", "never", "--network", "ns:/run/netns/" + s.ns.Name(),
		"--no-hosts", "-v", filepath.Join(c.Dir, "hosts") + ":/etc/hosts:ro",
		"-v", filepath.Join(c.Dir, "serviceaccount") + ":/var/run/secrets/kubernetes.io/serviceaccount:ro",
		"--ipc", "none", "--cgroup-parent", image.CgroupParent, "--ulimit", "nproc=4096:4096", "--ulimit", "nofile=4096:4096"}
	volumes := map[string]string{}
	for _, vm := range container.VolumeMounts {
		files, exact, err := volumeFiles(c, vm)
		if err != nil {
			return nil, err
		}
		if files == nil {
			return nil, fmt.Errorf("volume %s of %s: only ConfigMaps and emptyDirs are run from an image", vm.Name, c.Name)
		}
		source := filepath.Join(c.Dir, "volumes", string(c.Pod.UID), vm.Name)
		if err := os.RemoveAll(source); err != nil {
			return nil, err
		}
		if err := writeFiles(source, files); err != nil {
			return nil, err
		}
		mode := ":ro"
		if !exact {
			// An emptyDir is writable by the pod's user, as kubelet makes it (0777).
			if err := os.Chmod(source, 0o777); err != nil {
				return nil, err
			}
			mode = ""
		}
		volumes[vm.MountPath] = source
		args = append(args, "-v", source+":"+vm.MountPath+mode)
	}
	args = append(args, securityArgs(c.Pod.Spec.SecurityContext, container.SecurityContext)...)
	environment := s.containerEnv(c, container)
	for _, k := range slices.Sorted(maps.Keys(environment)) {
		args = append(args, "-e", k+"="+environment[k])
	}
	if len(container.Command) > 0 {
		entrypoint, err := json.Marshal(container.Command)
		if err != nil {
			return nil, err
		}
		args = append(args, "--entrypoint", string(entrypoint))
	}
	args = append(args, container.Image)
	args = append(args, slices.Concat(expand(container.Args, environment), c.Args)...)
	process, err := testenv.StartCommand(c.LogPath, rt.Command(context.Background(), args...))
	if err != nil {
		return nil, err
	}
	// podman run passes SIGTERM on to the container; a container left behind by a killed podman is removed.
	remove := func() { _ = rt.Command(context.Background(), "rm", "--force", "--time", "0", name).Run() }
	return &Started{Process: process, volumes: volumes, Container: name, remove: remove}, nil
}

// securityArgs are podman's arguments for the pod's and the container's security contexts, as kubelet passes them to
// the runtime: the container's settings over the pod's.
func securityArgs(pod *corev1.PodSecurityContext, container *corev1.SecurityContext) []string {
	var args []string
	var user, group *int64
	if pod != nil {
		user, group = pod.RunAsUser, pod.RunAsGroup
	}
	if container != nil {
		user, group = cmp.Or(container.RunAsUser, user), cmp.Or(container.RunAsGroup, group)
	}
	if user != nil {
		u := strconv.FormatInt(*user, 10)
		if group != nil {
			u += ":" + strconv.FormatInt(*group, 10)
		}
		args = append(args, "--user", u)
	}
	if container == nil {
		return args
	}
	if ptr.Deref(container.ReadOnlyRootFilesystem, false) {
		// Writable only where a volume is mounted: no tmpfs on /tmp, /run and /var/tmp as podman would add.
		args = append(args, "--read-only", "--read-only-tmpfs=false")
	}
	if !ptr.Deref(container.AllowPrivilegeEscalation, true) {
		args = append(args, "--security-opt", "no-new-privileges")
	}
	if caps := container.Capabilities; caps != nil {
		for _, c := range caps.Drop {
			args = append(args, "--cap-drop", strings.ToLower(string(c)))
		}
		for _, c := range caps.Add {
			args = append(args, "--cap-add", strings.ToLower(string(c)))
		}
	}
	return args
}
