// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package ciliumnodes

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/reaper"
)

// TestDescribeProcess: a leftover is told by its cgroup, as a path under the cgroup2 root like the reaper's, and its
// parent; Leftovers leaves out processes of the suites beside it by that cgroup.
func TestDescribeProcess(t *testing.T) {
	root, err := reaper.CgroupRoot()
	if err != nil {
		t.Skip(err)
	}
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	var want string
	for _, line := range strings.Split(string(b), "\n") {
		if own, ok := strings.CutPrefix(line, "0::"); ok {
			want = filepath.Join(root, own)
		}
	}
	got := describeProcess("/proc/" + strconv.Itoa(os.Getpid()))
	if got.cgroup != want {
		t.Errorf("cgroup %q, want %q", got.cgroup, want)
	}
	if parent := strconv.Itoa(os.Getppid()) + " "; !strings.HasPrefix(got.parent, parent) {
		t.Errorf("parent %q, want %q and its name", got.parent, parent)
	}
}
