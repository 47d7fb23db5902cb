// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// ModuleCacheUnderTmp points this process's go commands (ModuleDir) at the module cache bound read-only at name in the
// suite's temporary folder below /tmp, as a CI runner that sets GOMODCACHE=/tmp/... has it, so that a suite shows its
// processes work with the caches anywhere (their containers hide the machine's /tmp). modules are resolved first, as
// the bind takes no download. Read-only, so that nothing that clears /tmp reaches the real cache; the returned function
// undoes it, and should the suite die, its reaper unmounts what lies below its folder.
func ModuleCacheUnderTmp(name string, modules ...string) (func(), error) {
	if err := Root(); err != nil {
		return nil, err
	}
	for _, m := range modules {
		if _, err := ModuleDir(m); err != nil {
			return nil, err
		}
	}
	out, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		return nil, fmt.Errorf("go env GOMODCACHE: %w", err)
	}
	cache, dir := strings.TrimSpace(string(out)), filepath.Join(os.TempDir(), name)
	if !strings.HasPrefix(dir, "/tmp/") {
		dir = filepath.Join("/tmp", name)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, err
	}
	if err := unix.Mount(cache, dir, "", unix.MS_BIND, ""); err != nil {
		_ = os.Remove(dir)
		return nil, fmt.Errorf("binding the module cache at %s: %w", dir, err)
	}
	undo := func() {
		_ = unix.Unmount(dir, unix.MNT_DETACH)
		_ = os.Remove(dir)
	}
	if err := unix.Mount("", dir, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY, ""); err != nil {
		undo()
		return nil, fmt.Errorf("making %s read-only: %w", dir, err)
	}
	previous, had := os.LookupEnv("GOMODCACHE")
	if err := os.Setenv("GOMODCACHE", dir); err != nil {
		undo()
		return nil, err
	}
	return func() {
		if had {
			_ = os.Setenv("GOMODCACHE", previous)
		} else {
			_ = os.Unsetenv("GOMODCACHE")
		}
		undo()
	}, nil
}
