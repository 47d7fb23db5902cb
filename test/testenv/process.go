package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// Extension is the extension binary running as a process, as it runs in production.
type Extension struct {
	cmd     *exec.Cmd
	logPath string
	stopped chan error
}

// BuildExtension builds the extension binary into dir and returns its path. The Go build cache makes this quick
// after the first time.
func BuildExtension(dir string) (string, error) {
	root, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		return "", fmt.Errorf("finding the module root: %w", err)
	}
	bin := filepath.Join(dir, "gardener-extension-cilium-selfhosted")
	build := exec.Command("go", "build", "-o", bin, "./cmd/gardener-extension-cilium-selfhosted")
	build.Dir = string(root[:len(root)-1])
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building the extension: %w\n%s", err, out)
	}
	return bin, nil
}

// StartExtension starts binary with args; its output goes to a log file in the scratch directory.
func (e *Env) StartExtension(binary string, args []string) (*Extension, error) {
	x := &Extension{logPath: filepath.Join(e.Dir, "extension.log"), stopped: make(chan error, 1)}
	logFile, err := os.Create(x.logPath)
	if err != nil {
		return nil, err
	}
	x.cmd = exec.Command(binary, args...)
	x.cmd.Stdout, x.cmd.Stderr = logFile, logFile
	if err := x.cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("starting the extension: %w", err)
	}
	go func() {
		x.stopped <- x.cmd.Wait()
		logFile.Close()
	}()
	return x, nil
}

// Stopped reports the end of the process.
func (x *Extension) Stopped() <-chan error { return x.stopped }

// LogPath is where the process writes its log.
func (x *Extension) LogPath() string { return x.logPath }

// Log is what the process has logged so far.
func (x *Extension) Log() string {
	b, _ := os.ReadFile(x.logPath)
	return string(b)
}

// Stop ends the process the way the kubelet does: SIGTERM, then SIGKILL after a grace period.
func (x *Extension) Stop(ctx context.Context) {
	_ = x.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-x.stopped:
	case <-time.After(30 * time.Second):
		_ = x.cmd.Process.Kill()
		<-x.stopped
	case <-ctx.Done():
		_ = x.cmd.Process.Kill()
		<-x.stopped
	}
}
