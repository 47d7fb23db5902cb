// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/repo"
)

// Process is a program of the test running as a process with its output in a log file: the extension as it runs in
// production, or Cilium's operator.
type Process struct {
	cmd     *exec.Cmd
	logPath string
	// done is closed when the process has ended, with its result in err: any number of waiters see it.
	done chan struct{}
	err  error
}

// StartProcess starts binary with args, writing its output to logPath.
func StartProcess(logPath, binary string, args ...string) (*Process, error) {
	return StartCommand(logPath, exec.Command(binary, args...))
}

// StartCommand starts cmd, writing its output to logPath.
func StartCommand(logPath string, cmd *exec.Cmd) (*Process, error) {
	p := &Process{logPath: logPath, done: make(chan struct{})}
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		return nil, err
	}
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	p.cmd = cmd
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	if err := p.cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("starting %s: %w", filepath.Base(cmd.Path), err)
	}
	go func() {
		p.err = p.cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	return p, nil
}

// BuildExtension builds the extension binary as its image holds it (hack/build.sh, where make build puts it) and
// returns its path. go build relinks only when the sources changed, so the suites of one make test link it once
// (about 7 CPU-seconds each otherwise); a lock keeps suites from building it at the same time.
func BuildExtension() (string, error) {
	root, err := repo.Root()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(root, "bin")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	lock, err := os.OpenFile(filepath.Join(dir, ".build.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("locking %s: %w", lock.Name(), err)
	}
	bin, err := repo.Script("hack/build.sh")
	if err != nil {
		return "", fmt.Errorf("building the extension: %w", err)
	}
	return filepath.Join(root, bin), nil
}

// Start starts the extension binary with args; its output goes to a log file in the scratch directory.
func (e Extensions) Start(binary string, args []string) (*Process, error) {
	return StartProcess(filepath.Join(e.Dir, "extension.log"), binary, args...)
}

// Stopped is closed when the process has ended.
func (p *Process) Stopped() <-chan struct{} { return p.done }

// Pid is the process's ID.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Err is how the process ended, once Stopped is closed.
func (p *Process) Err() error { return p.err }

// LogPath is where the process writes its log.
func (p *Process) LogPath() string { return p.logPath }

// Log is what the process has logged so far.
func (p *Process) Log() string {
	b, _ := os.ReadFile(p.logPath)
	return string(b)
}

// LogTail is the last n lines of what the process has logged.
func (p *Process) LogTail(n int) string { return fileTail(p.logPath, n) }

// fileTail is the last n lines of the file at path.
func fileTail(path string, n int) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(string(b), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// Kill ends the process at once and waits for it.
func (p *Process) Kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// Stop ends the process the way the kubelet does: SIGTERM, then SIGKILL after a grace period.
func (p *Process) Stop(ctx context.Context) {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	case <-ctx.Done():
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}
