// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

// Package reaper makes sure that nothing a test binary starts outlives it, even when it panics, times out or is
// killed: Confine moves the test binary into a cgroup of its own, so that every process it starts, their children and
// the processes envtest starts with only a process group of their own are in it, and starts a reaper process outside
// it. When the test binary ends for any reason, the reaper kills the cgroup (cgroup.kill), removes the network
// namespaces the binary registered with NetNS and its temporary folder, and says what it found still there. A reaper
// that was killed too leaves a state file behind, which the next Confine on the machine reports and cleans up.
//
// A parent-death signal would not do: it is per thread, and neither envtest's etcd and kube-apiserver (controller-runtime
// starts them with only a process group of their own: pkg/internal/testing/process/procattr_unix.go) nor the
// grandchildren of `ip netns exec` would get it.
package reaper

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/util/wait"
)

// BaseCgroup is the cgroup, below the cgroup a test binary was started in, that holds one cgroup per confined test
// binary. It stays, like /run/netns, once the first suite has made it.
const BaseCgroup = "cilium-selfhosted-tests"

// stateDir holds the state of each confined test binary while it runs, for its reaper and for later runs.
const stateDir = "/run/cilium-selfhosted-tests"

// reaperEnv, set in the environment of a test binary started again as a reaper, names the state file to watch over.
const reaperEnv = "CILIUM_SELFHOSTED_TEST_REAPER"

func init() {
	if state := os.Getenv(reaperEnv); state != "" {
		os.Exit(reap(state))
	}
}

// state is what a reaper, or a later run, needs to clean up after a test binary.
type state struct {
	Suite       string
	Owner       process
	Reaper      process
	Cgroup      string
	TempDir     string
	NetNS       []string
	path        string
	mu          sync.Mutex
	lifelineEnd *os.File
}

// process is a process by ID and start time, so that a reused ID is not taken for it.
type process struct {
	Pid   int
	Start string
}

// current is the confined binary's state, nil while it is not confined.
var current atomic.Pointer[state]

// Confine puts the test binary in a cgroup of its own and starts its reaper, after reporting and removing what earlier
// runs on this machine left behind. Call it before the binary starts any process: one started meanwhile may stay
// outside. It is idempotent; without root or a cgroup2 hierarchy it returns why it cannot, and the binary runs
// unconfined.
var Confine = sync.OnceValue(confine)

// Suite is the name of the running test binary's suite: its package's name.
func Suite() string { return strings.TrimSuffix(filepath.Base(os.Args[0]), ".test") }

// ConfineOrWarn confines the binary, or says why the processes it starts may outlive it.
func ConfineOrWarn() {
	if err := Confine(); err != nil {
		fmt.Fprintln(os.Stderr, "reaper: the processes this binary starts are not confined, and may outlive it if it panics:", err)
	}
}

func confine() error {
	if os.Getuid() != 0 {
		return errors.New("confining a suite's processes in a cgroup needs root")
	}
	parent, err := parentCgroup()
	if err != nil {
		return err
	}
	for _, line := range CleanLeftovers() {
		fmt.Fprintln(os.Stderr, "reaper:", line)
	}
	s, err := newState(parent)
	if err != nil {
		return err
	}
	if err := s.startReaper(); err != nil {
		return err
	}
	// The reaper stays where it was; this process, and from now on all it starts, move into the cgroup.
	if err := os.WriteFile(filepath.Join(s.Cgroup, "self", "cgroup.procs"), []byte(strconv.Itoa(s.Owner.Pid)), 0o644); err != nil {
		s.lifelineEnd.Close()
		return fmt.Errorf("moving the test binary into %s: %w", s.Cgroup, err)
	}
	current.Store(s)
	return nil
}

// newState makes the binary's cgroup below parent and, in a test binary, its temporary folder, and saves the state
// that names them.
func newState(parent string) (*state, error) {
	suite := Suite()
	self, err := processOf(os.Getpid())
	if err != nil {
		return nil, err
	}
	s := &state{Suite: suite, Owner: self}
	// A name no other run has, even one in another PID namespace on the same cgroup hierarchy.
	if s.Cgroup, err = os.MkdirTemp(parent, suite+"-"+strconv.Itoa(self.Pid)+"-"); err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(s.Cgroup, "cgroup.kill")); err != nil {
		_ = os.Remove(s.Cgroup)
		return nil, fmt.Errorf("the kernel has no cgroup.kill (Linux 5.14 or newer): %w", err)
	}
	if err := os.Mkdir(filepath.Join(s.Cgroup, "self"), 0o755); err != nil {
		_ = os.Remove(s.Cgroup)
		return nil, err
	}
	s.path = filepath.Join(stateDir, filepath.Base(s.Cgroup)+".json")
	if err := os.MkdirAll(stateDir, 0o755); err != nil {
		_ = RemoveCgroups(s.Cgroup)
		return nil, err
	}
	// In a test binary, temporary folders of the binary and of everything it starts (envtest's etcd data among them)
	// go in one folder that the reaper removes. A program (the demo, the bench) keeps what it writes there.
	if testing.Testing() {
		if s.TempDir, err = os.MkdirTemp("", "cst-"+filepath.Base(s.Cgroup)+"-"); err != nil {
			_ = RemoveCgroups(s.Cgroup)
			return nil, err
		}
	}
	if err := s.save(); err != nil {
		_ = RemoveCgroups(s.Cgroup)
		return nil, err
	}
	return s, nil
}

// startReaper starts the reaper process for s and points this process's temporary folders into s.TempDir.
func (s *state) startReaper() error {
	binary, err := os.Executable()
	if err != nil {
		return err
	}
	// The reaper reads a pipe whose only writer is this process (os.Pipe's ends are close-on-exec, so children do not
	// inherit it): the read ends when this process is gone, however it ended. From here on, closing it makes the
	// reaper clean up what confine made.
	lifeline, lifelineEnd, err := os.Pipe()
	if err != nil {
		return err
	}
	cmd := exec.Command(binary)
	cmd.Env = append(os.Environ(), reaperEnv+"="+s.path)
	cmd.ExtraFiles = []*os.File{lifeline}
	// Its reports go where the binary's output goes; `go test` waits for them, as it waits for that stream to close.
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	// A session of its own: a Ctrl-C to the test's process group does not reach it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = cmd.Start()
	lifeline.Close()
	if err != nil {
		lifelineEnd.Close()
		return fmt.Errorf("starting the reaper: %w", err)
	}
	s.lifelineEnd = lifelineEnd // kept open, and referenced, until the process ends
	if s.Reaper, err = processOf(cmd.Process.Pid); err == nil {
		err = s.save()
	}
	if err == nil && s.TempDir != "" {
		err = os.Setenv("TMPDIR", s.TempDir)
	}
	if err != nil {
		lifelineEnd.Close()
	}
	return err
}

// parentCgroup is where the binary's cgroup goes: below the cgroup the binary was started in, so that the limits and
// the stop of whoever started it (a systemd unit, a CI job) still reach everything; beside its own when the binary
// was started by a confined one (a suite that runs `go test`).
func parentCgroup() (string, error) {
	root, err := CgroupRoot()
	if err != nil {
		return "", err
	}
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if own, ok := strings.CutPrefix(line, "0::"); ok {
			dir := filepath.Join(root, own)
			if filepath.Base(dir) == "self" {
				if _, err := os.Stat(filepath.Join(filepath.Dir(dir), "self")); err == nil && strings.Contains(dir, "/"+BaseCgroup+"/") {
					return filepath.Dir(dir), nil
				}
			}
			return filepath.Join(dir, BaseCgroup), os.MkdirAll(filepath.Join(dir, BaseCgroup), 0o755)
		}
	}
	return "", errors.New("/proc/self/cgroup names no cgroup2 cgroup")
}

// Cgroup returns a cgroup named name inside the confined binary's cgroup, for processes a suite places in cgroups of
// their own (the datapath's agents); outside a confined binary, a cgroup of that name under the cgroup2 root. The
// caller creates it.
func Cgroup(name string) (string, error) {
	if s := current.Load(); s != nil {
		return filepath.Join(s.Cgroup, name), nil
	}
	root, err := CgroupRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, name), nil
}

// NetNS registers a named network namespace (`ip netns add`) that the reaper deletes if the binary ends without
// deleting it.
func NetNS(name string) {
	s := current.Load()
	if s == nil {
		return
	}
	s.mu.Lock()
	s.NetNS = append(s.NetNS, name)
	s.mu.Unlock()
	if err := s.save(); err != nil {
		fmt.Fprintln(os.Stderr, "reaper: registering network namespace", name+":", err)
	}
}

// ReaperPid is the reaper's process ID, 0 when the binary is not confined.
func ReaperPid() int {
	if s := current.Load(); s != nil {
		return s.Reaper.Pid
	}
	return 0
}

// CPU is the CPU time the confined binary and every process it started have used so far, ended ones included (its
// cgroup's cpu.stat); false when the binary is not confined.
func CPU() (user, system time.Duration, ok bool) {
	s := current.Load()
	if s == nil {
		return 0, 0, false
	}
	b, err := os.ReadFile(filepath.Join(s.Cgroup, "cpu.stat"))
	if err != nil {
		return 0, 0, false
	}
	for line := range strings.Lines(string(b)) {
		key, value, _ := strings.Cut(strings.TrimSpace(line), " ")
		usec, err := strconv.ParseInt(value, 10, 64)
		if err != nil {
			continue
		}
		switch key {
		case "user_usec":
			user = time.Duration(usec) * time.Microsecond
		case "system_usec":
			system = time.Duration(usec) * time.Microsecond
		}
	}
	return user, system, true
}

// CgroupPath is the confined binary's cgroup, "" when it is not confined.
func CgroupPath() string {
	if s := current.Load(); s != nil {
		return s.Cgroup
	}
	return ""
}

func (s *state) save() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	tmp := s.path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, s.path)
}

// reap waits until the test binary is gone, then cleans up after it.
func reap(statePath string) int {
	// `go test` may be gone before the report is written: the cleanup matters more than the report.
	signal.Ignore(syscall.SIGPIPE)
	lifeline := os.NewFile(3, "lifeline")
	_, _ = io.Copy(io.Discard, lifeline)
	// Claim the state, so that a concurrent CleanLeftovers does not clean up too.
	claimed := statePath + ".reaping"
	if err := os.Rename(statePath, claimed); err != nil {
		return 0
	}
	s, err := load(claimed)
	if err != nil {
		fmt.Fprintln(os.Stderr, "reaper:", err)
		return 1
	}
	left, err := s.clean()
	release(claimed, statePath, err)
	if len(left) > 0 {
		fmt.Fprintf(os.Stderr, "reaper: %s (pid %d) ended and left behind, now removed: %s\n", s.Suite, s.Owner.Pid, strings.Join(left, "; "))
	}
	// Suites the binary started (a `go test` it ran) were confined inside its cgroup, and their reapers with them: the
	// kill took those reapers too, and what they would have removed is left to this one.
	for _, line := range CleanLeftovers() {
		fmt.Fprintln(os.Stderr, "reaper:", line)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "reaper: cleaning up after %s (pid %d) failed, the next suite tries again: %v\n", s.Suite, s.Owner.Pid, err)
	}
	return 0
}

// release gives up a claimed state: removed once everything is cleaned up, else back under its name for the next try.
func release(claimed, path string, cleanErr error) {
	if cleanErr != nil {
		_ = os.Rename(claimed, path)
		return
	}
	_ = os.Remove(claimed)
}

func load(path string) (*state, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	s := &state{}
	if err := json.Unmarshal(b, s); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// CleanLeftovers reports and removes what test binaries that are gone, and whose reapers are gone too, left on this
// machine: their state files, also those a reaper or a cleaner had claimed before it was killed.
func CleanLeftovers() []string {
	self, err := processOf(os.Getpid())
	if err != nil {
		return []string{err.Error()}
	}
	paths, _ := filepath.Glob(filepath.Join(stateDir, "*.json*"))
	var report []string
	for _, path := range paths {
		if strings.HasSuffix(path, ".tmp") {
			continue
		}
		s, err := load(path)
		if err != nil || s.Owner.alive() || s.Reaper.alive() {
			continue
		}
		if _, claimer, ok := strings.Cut(path, ".reaping-"); ok {
			var p process
			if _, err := fmt.Sscanf(claimer, "%d-%s", &p.Pid, &p.Start); err == nil && p.alive() {
				continue
			}
		}
		original := strings.SplitN(path, ".json", 2)[0] + ".json"
		claimed := fmt.Sprintf("%s.reaping-%d-%s", original, self.Pid, self.Start)
		if os.Rename(path, claimed) != nil {
			continue
		}
		left, err := s.clean()
		release(claimed, original, err)
		line := fmt.Sprintf("an earlier %s (pid %d) and its reaper ended and left behind, now removed: %s", s.Suite, s.Owner.Pid, strings.Join(append(left, "its state "+path), "; "))
		if err != nil {
			line += fmt.Sprintf("; not all of it, the next suite tries again: %v", err)
		}
		report = append(report, line)
	}
	return report
}

// clean kills what is left in the cgroup and removes the cgroup, the network namespaces and the temporary folder. It
// returns what it found, and what it could not remove.
func (s *state) clean() ([]string, error) {
	var left []string
	var errs []error
	for _, pid := range cgroupProcs(s.Cgroup) {
		// The binary itself stays listed until `go test` has waited for it: it ended, it was not left behind.
		if pid == s.Owner.Pid {
			continue
		}
		left = append(left, fmt.Sprintf("process %d (%s)", pid, commandLine(pid)))
	}
	if err := killCgroup(s.Cgroup); err != nil {
		errs = append(errs, err)
	}
	for _, ns := range s.NetNS {
		if _, err := os.Stat(filepath.Join("/run/netns", ns)); err != nil {
			continue
		}
		if out, err := exec.Command("ip", "netns", "delete", ns).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("deleting network namespace %s: %w: %s", ns, err, out))
			continue
		}
		left = append(left, "network namespace "+ns)
	}
	if s.TempDir != "" {
		// Mounts the suite made below its folder (the test nodes' bpffs) go first: RemoveAll stops at a mount point.
		mounts, err := mountsUnder(s.TempDir)
		if err != nil {
			errs = append(errs, err)
		}
		for _, m := range mounts {
			if err := unix.Unmount(m, unix.MNT_DETACH); err != nil {
				errs = append(errs, fmt.Errorf("unmounting %s: %w", m, err))
				continue
			}
			left = append(left, "mount "+m)
		}
		if err := os.RemoveAll(s.TempDir); err != nil {
			errs = append(errs, err)
		}
	}
	return left, errors.Join(errs...)
}

// mountsUnder are the mount points below dir, the deepest first.
func mountsUnder(dir string) ([]string, error) {
	mountinfo, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	var mounts []string
	for _, l := range strings.Split(string(mountinfo), "\n") {
		if f := strings.Fields(l); len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			mounts = append(mounts, f[4])
		}
	}
	slices.SortFunc(mounts, func(a, b string) int { return len(b) - len(a) })
	return mounts, nil
}

// killCgroup kills every process in dir and below, waits until they are gone and removes the cgroups.
func killCgroup(dir string) error {
	if _, err := os.Stat(dir); os.IsNotExist(err) {
		return nil
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0o644); err != nil {
		return fmt.Errorf("killing cgroup %s: %w", dir, err)
	}
	emptied := func(context.Context) (bool, error) {
		b, err := os.ReadFile(filepath.Join(dir, "cgroup.events"))
		return err == nil && !strings.Contains(string(b), "populated 1"), nil
	}
	if err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 30*time.Second, true, emptied); err != nil {
		return fmt.Errorf("cgroup %s still has processes 30s after cgroup.kill", dir)
	}
	return RemoveCgroups(dir)
}

// cgroupProcs lists the processes in dir and the cgroups below it.
func cgroupProcs(dir string) []int {
	var pids []int
	_ = filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
			return nil
		}
		b, _ := os.ReadFile(path)
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				pids = append(pids, pid)
			}
		}
		return nil
	})
	slices.Sort(pids)
	return pids
}

func commandLine(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	cmd := strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " "))
	if len(cmd) > 120 {
		cmd = cmd[:120] + "..."
	}
	return cmd
}

// processOf is pid with its start time (field 22 of /proc/PID/stat).
func processOf(pid int) (process, error) {
	start, err := startTime(pid)
	return process{Pid: pid, Start: start}, err
}

func startTime(pid int) (string, error) {
	fields, err := stat(pid)
	if err != nil {
		return "", err
	}
	return fields[19], nil
}

// stat is /proc/PID/stat from its third field (the state) on.
func stat(pid int) ([]string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, err
	}
	// The command name, in parentheses, may hold spaces: fields count from after its closing parenthesis.
	fields := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(fields) < 20 {
		return nil, fmt.Errorf("/proc/%d/stat: too few fields", pid)
	}
	return fields, nil
}

// Running says whether the process pid runs: a zombie, which nothing has waited for yet, does not.
func Running(pid int) bool {
	fields, err := stat(pid)
	return err == nil && fields[0] != "Z"
}

// alive says whether the process runs: a zombie, which nothing has waited for yet, does not.
func (p process) alive() bool {
	if p.Pid == 0 {
		return false
	}
	fields, err := stat(p.Pid)
	return err == nil && fields[19] == p.Start && fields[0] != "Z"
}

// CgroupRoot is where the machine mounts the cgroup2 hierarchy: the root of a unified hierarchy, or its unified
// part on a hybrid one.
func CgroupRoot() (string, error) {
	for _, dir := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
		if _, err := os.Stat(filepath.Join(dir, "cgroup.controllers")); err == nil {
			return dir, nil
		}
	}
	return "", fmt.Errorf("no cgroup2 hierarchy under /sys/fs/cgroup")
}

// RemoveCgroups removes dir and the cgroups below it, once their processes are gone.
func RemoveCgroups(dir string) error {
	entries, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.IsDir() {
			if err := RemoveCgroups(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	if err := os.Remove(dir); err != nil && !os.IsNotExist(err) {
		return err
	}
	return nil
}
