// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package ciliumnodes

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/reaper"
)

// HostState is what an agent could change on the machine when its isolation fails: kernel-wide sysctls, the host's
// network namespace (links, iptables rules), mounts, the cgroup2 root and Cilium's runtime directory. Other suites of
// `go test ./...` run at the same time in their own namespaces and change none of it.
type HostState struct {
	sysctls      map[string]string
	links        string
	iptables     string
	mounts       []string
	cgroupRoot   []string
	ciliumRunDir bool
}

var hostSysctls = []string{
	"kernel/unprivileged_bpf_disabled", "kernel/timer_migration", "net/ipv4/ip_forward", "net/ipv4/conf/all/rp_filter",
	"net/core/bpf_jit_enable",
}

// SnapshotHost records the machine's state, for Leftovers.
func SnapshotHost() (*HostState, error) {
	s := &HostState{sysctls: map[string]string{}}
	for _, k := range hostSysctls {
		b, err := os.ReadFile(filepath.Join("/proc/sys", k))
		if err != nil {
			return nil, err
		}
		s.sysctls[k] = strings.TrimSpace(string(b))
	}
	links, err := exec.Command("ip", "-o", "link", "show").Output()
	if err != nil {
		return nil, err
	}
	// Counters and flags of existing links change on their own; their names and kinds must not.
	for _, l := range strings.Split(strings.TrimSpace(string(links)), "\n") {
		if f := strings.Fields(l); len(f) > 1 {
			s.links += f[1] + "\n"
		}
	}
	if out, err := exec.Command("iptables-save").Output(); err == nil {
		for _, l := range strings.Split(string(out), "\n") {
			if !strings.HasPrefix(l, "#") {
				s.iptables += l + "\n"
			}
		}
	}
	mountinfo, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	for _, l := range strings.Split(strings.TrimSpace(string(mountinfo)), "\n") {
		// Network namespaces are pinned under /run/netns, also by suites running in parallel; this suite's are
		// checked by name. /run/netns itself becomes a mount point the first time anything on the machine creates a
		// named namespace (iproute2's ip/ipnetns.c netns_add makes it a shared bind mount) and stays one until reboot;
		// on a fresh machine that may be another suite, during this one.
		if f := strings.Fields(l); len(f) > 4 && f[4] != "/run/netns" && !strings.HasPrefix(f[4], "/run/netns/") {
			s.mounts = append(s.mounts, f[4])
		}
	}
	slices.Sort(s.mounts)
	root, err := reaper.CgroupRoot()
	if err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		// The reaper's cgroup stays once the first suite on the machine has made it, maybe during this one.
		if e.Name() != reaper.BaseCgroup {
			s.cgroupRoot = append(s.cgroupRoot, e.Name())
		}
	}
	_, err = os.Stat("/var/run/cilium")
	s.ciliumRunDir = err == nil
	return s, nil
}

// Leftovers compares the machine with the state before the suite, and lists namespaces of the suite's and processes
// of binaries (the agents', the router's daemons) that still run.
func (before *HostState) Leftovers(prefix string, binaries ...string) ([]string, error) {
	after, err := SnapshotHost()
	if err != nil {
		return nil, err
	}
	var problems []string
	for _, k := range hostSysctls {
		if before.sysctls[k] != after.sysctls[k] {
			problems = append(problems, fmt.Sprintf("sysctl %s changed from %s to %s", k, before.sysctls[k], after.sysctls[k]))
		}
	}
	if before.links != after.links {
		problems = append(problems, fmt.Sprintf("the host's links changed:\n%s\nnow\n%s", before.links, after.links))
	}
	if before.iptables != after.iptables {
		problems = append(problems, "the host's iptables rules changed")
	}
	if !slices.Equal(before.mounts, after.mounts) {
		problems = append(problems, fmt.Sprintf("mounts changed: %v, now %v", before.mounts, after.mounts))
	}
	if !slices.Equal(before.cgroupRoot, after.cgroupRoot) {
		problems = append(problems, fmt.Sprintf("the cgroup2 root changed: %v, now %v", before.cgroupRoot, after.cgroupRoot))
	}
	if !before.ciliumRunDir && after.ciliumRunDir {
		problems = append(problems, "/var/run/cilium was created on the host")
	}
	netns, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return nil, err
	}
	if strings.Contains(string(netns), prefix) {
		problems = append(problems, "network namespaces are left: "+string(netns))
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/exe")
	own := reaper.CgroupPath()
	for _, p := range procs {
		exe, err := os.Readlink(p)
		if err != nil || !slices.Contains(binaries, exe) {
			continue
		}
		where := describeProcess(filepath.Dir(p))
		if where.cgroup == "" {
			continue // it ended meanwhile
		}
		// A suite that runs beside this one (make test's groups run side by side; test/framework/frr's starts routers)
		// has them in its own cgroup, and its reaper sees to them.
		if own != "" && strings.Contains(where.cgroup, "/"+reaper.BaseCgroup+"/") && where.cgroup != own && !strings.HasPrefix(where.cgroup, own+"/") {
			continue
		}
		problems = append(problems, fmt.Sprintf("%s still runs: %s", exe, where))
	}
	return problems, nil
}

// process is where a leftover process runs, to tell whose it is.
type process struct{ dir, cgroup, parent string }

func (p process) String() string {
	return fmt.Sprintf("%s (cgroup %s, parent %s)", p.dir, p.cgroup, p.parent)
}

// describeProcess reads the cgroup (as a path under the cgroup2 root) and the parent of the process at dir (/proc/<pid>).
func describeProcess(dir string) process {
	p := process{dir: dir}
	if b, err := os.ReadFile(filepath.Join(dir, "cgroup")); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if own, ok := strings.CutPrefix(line, "0::"); ok {
				if root, err := reaper.CgroupRoot(); err == nil {
					p.cgroup = filepath.Join(root, own)
				}
			}
		}
	}
	if b, err := os.ReadFile(filepath.Join(dir, "status")); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if ppid, ok := strings.CutPrefix(line, "PPid:"); ok {
				ppid = strings.TrimSpace(ppid)
				comm, _ := os.ReadFile(filepath.Join("/proc", ppid, "comm"))
				p.parent = ppid + " " + strings.TrimSpace(string(comm))
			}
		}
	}
	return p
}
