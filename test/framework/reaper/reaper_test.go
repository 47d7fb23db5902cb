// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package reaper_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/reaper"
)

// helperEnv makes the test binary play a suite: it confines itself, starts processes as the suites do and a network
// namespace, prints what it started, and then ends as the variable says.
const helperEnv = "REAPER_TEST_HELPER"

// started is what the helper started.
type started struct {
	// Pids are a child, a grandchild in a process group of its own (as envtest starts etcd and kube-apiserver), and a
	// daemon in a session of its own whose parent has exited.
	Pids   []int
	NetNS  string
	Cgroup string
	Reaper int
	// Nested is what a suite the helper ran started, confined inside the helper's cgroup.
	Nested *started
}

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		helper(mode)
		return
	}
	os.Exit(m.Run())
}

func helper(mode string) {
	if err := reaper.Confine(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	s := started{Cgroup: reaper.CgroupPath(), Reaper: reaper.ReaperPid(), NetNS: "reaper-test-" + strconv.Itoa(os.Getpid())}
	child := exec.Command("sleep", "600")
	if err := child.Start(); err != nil {
		panic(err)
	}
	s.Pids = append(s.Pids, child.Process.Pid)
	for _, script := range []string{
		"sleep 600 </dev/null >/dev/null 2>&1 & echo $!",        // a grandchild in a process group of its own
		"setsid sleep 600 </dev/null >/dev/null 2>&1 & echo $!", // a daemon: its own session, its parent gone
	} {
		cmd := exec.Command("sh", "-c", script)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		out, err := cmd.Output()
		if err != nil {
			panic(err)
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
		if err != nil {
			panic(err)
		}
		s.Pids = append(s.Pids, pid)
	}
	if out, err := exec.Command("ip", "netns", "add", s.NetNS).CombinedOutput(); err != nil {
		panic(fmt.Sprintf("%v: %s", err, out))
	}
	reaper.NetNS(s.NetNS)
	if mode == "nested" {
		s.Nested = nested()
	}
	if err := json.NewEncoder(os.Stdout).Encode(s); err != nil {
		panic(err)
	}
	switch mode {
	case "panic", "nested":
		// Once the test has seen its processes run: a panic right after saying what it started would end them first.
		_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
		go func() { panic("on purpose: a test of the suite panics") }()
		select {}
	case "kill":
		select {}
	}
}

// nested runs another helper, as a suite that runs `go test` does, and returns what it started once it says.
func nested() *started {
	binary, err := os.Executable()
	if err != nil {
		panic(err)
	}
	cmd := exec.Command(binary)
	cmd.Env = append(os.Environ(), helperEnv+"=kill")
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		panic(err)
	}
	if err := cmd.Start(); err != nil {
		panic(err)
	}
	s := &started{}
	line, err := bufio.NewReader(stdout).ReadBytes('\n')
	if err == nil {
		err = json.Unmarshal(line, s)
	}
	if err != nil {
		panic(err)
	}
	return s
}

// startHelper starts the test binary as a helper suite and returns it, what it started and its stderr once it ends.
func startHelper(t *testing.T, mode string) (*exec.Cmd, started, *bytes.Buffer) {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("confining processes in a cgroup and creating network namespaces needs root")
	}
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), helperEnv+"="+mode)
	stderr := &bytes.Buffer{}
	cmd.Stderr = stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var s started
	line, err := bufio.NewReader(stdout).ReadBytes('\n')
	if err == nil {
		err = json.Unmarshal(line, &s)
	}
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("the helper did not say what it started: %v\n%s", err, stderr)
	}
	t.Cleanup(func() {
		for _, pid := range append(s.Pids, s.Reaper) {
			if reaper.Running(pid) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		_ = exec.Command("ip", "netns", "delete", s.NetNS).Run()
		_ = reaper.RemoveCgroups(s.Cgroup)
	})
	if len(s.Pids) != 3 || s.Reaper == 0 || s.Cgroup == "" {
		t.Fatalf("the helper started %+v", s)
	}
	for _, pid := range s.Pids {
		if !reaper.Running(pid) {
			t.Fatalf("process %d of the helper is not running", pid)
		}
	}
	// A helper that ends by itself goes on now.
	_, _ = stdin.Write([]byte("\n"))
	return cmd, s, stderr
}

// assertNothingLeft waits until the helper's processes, its namespace and its cgroup are gone, and those of the suite
// it ran.
func assertNothingLeft(t *testing.T, s started) {
	t.Helper()
	if s.Nested != nil {
		assertNothingLeft(t, *s.Nested)
	}
	var left []string
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		left = nil
		for _, pid := range s.Pids {
			if reaper.Running(pid) {
				left = append(left, "process "+strconv.Itoa(pid))
			}
		}
		if _, err := os.Stat(filepath.Join("/run/netns", s.NetNS)); err == nil {
			left = append(left, "network namespace "+s.NetNS)
		}
		if _, err := os.Stat(s.Cgroup); err == nil {
			left = append(left, "cgroup "+s.Cgroup)
		}
		return len(left) == 0, nil
	})
	if err != nil {
		t.Fatalf("left behind: %s", strings.Join(left, ", "))
	}
}

// TestPanickingSuiteLeavesNothing: a suite binary that panics takes everything it started with it.
func TestPanickingSuiteLeavesNothing(t *testing.T) {
	cmd, s, stderr := startHelper(t, "panic")
	// Wait returns once the reaper, which shares the binary's stderr, has finished too.
	err := cmd.Wait()
	if !strings.Contains(stderr.String(), "panic: on purpose") {
		t.Fatalf("the helper did not panic (%v):\n%s", err, stderr)
	}
	assertNothingLeft(t, s)
	if !strings.Contains(stderr.String(), "network namespace "+s.NetNS) {
		t.Errorf("the reaper did not report the namespace it removed:\n%s", stderr)
	}
}

// TestKilledSuiteLeavesNothing: a suite binary killed with SIGKILL (a `go test` timeout's last resort, the OOM killer)
// takes everything it started with it.
func TestKilledSuiteLeavesNothing(t *testing.T) {
	cmd, s, stderr := startHelper(t, "kill")
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	assertNothingLeft(t, s)
	for _, pid := range s.Pids {
		if !strings.Contains(stderr.String(), "process "+strconv.Itoa(pid)) {
			t.Errorf("the reaper did not report process %d:\n%s", pid, stderr)
		}
	}
}

// TestNextRunCleansUpAfterAKilledReaper: when the reaper is killed with the suite, the processes survive until the next
// suite on the machine confines itself, which reports and removes them.
func TestNextRunCleansUpAfterAKilledReaper(t *testing.T) {
	cmd, s, _ := startHelper(t, "kill")
	if err := syscall.Kill(s.Reaper, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	// A killed process ends when the kernel gets to it: on a loaded machine the reaper may still run a moment after
	// the signal, and a cleaner leaves the state of a binary whose reaper runs alone (the cold run of session 25).
	if err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return !reaper.Running(s.Reaper), nil
	}); err != nil {
		t.Fatalf("the reaper %d still runs after SIGKILL", s.Reaper)
	}
	for _, pid := range s.Pids {
		if !reaper.Running(pid) {
			t.Fatalf("process %d ended without a reaper: this test would not show what the next run does", pid)
		}
	}
	report := strings.Join(reaper.CleanLeftovers(), "\n")
	assertNothingLeft(t, s)
	// Another suite confining itself at the same moment may have been the one to clean up.
	if report != "" && !strings.Contains(report, "network namespace "+s.NetNS) {
		t.Errorf("the report does not name the namespace:\n%s", report)
	}
}

// TestNestedSuiteLeavesNothing: a suite that runs another suite (test/scripts/freshclone runs `go test`) confines it inside its
// own cgroup, where the outer binary's limits and end reach it; when the outer one panics, the inner one, its
// processes, its reaper and its namespace go too.
func TestNestedSuiteLeavesNothing(t *testing.T) {
	cmd, s, stderr := startHelper(t, "nested")
	if s.Nested == nil || filepath.Dir(s.Nested.Cgroup) != s.Cgroup {
		t.Fatalf("the inner suite's cgroup %v is not inside the outer one's %s", s.Nested, s.Cgroup)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "delete", s.Nested.NetNS).Run() })
	_ = cmd.Wait()
	assertNothingLeft(t, s)
	if reaper.Running(s.Nested.Reaper) {
		t.Errorf("the inner suite's reaper %d still runs", s.Nested.Reaper)
	}
	// assertNothingLeft saw the namespace gone before the cleanup above ran: a reaper removed it. The inner one reports
	// it unless the outer one's kill, which takes the inner reaper with the rest of the cgroup, came between its
	// removing and its reporting (make test u3 of session 34, on a loaded machine).
	if !strings.Contains(stderr.String(), "network namespace "+s.Nested.NetNS) {
		t.Logf("the inner suite's namespace went unreported: its reaper was killed right after removing it:\n%s", stderr)
	}
}
