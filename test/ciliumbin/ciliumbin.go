// Package ciliumbin finds Cilium's binaries that tests run: built from the cilium module pinned in hack/cilium by its
// build.sh into the tool cache, or given by an environment variable.
package ciliumbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Binaries Path knows, each with the environment variable that overrides it.
const (
	Operator = "cilium-operator"
	Dbg      = "cilium-dbg"
)

var envVars = map[string]string{Operator: "CILIUM_OPERATOR", Dbg: "CILIUM_DBG"}

// Path is the binary name: its environment variable, else what hack/cilium/build.sh builds or has cached.
func Path(name string) (string, error) {
	envVar, ok := envVars[name]
	if !ok {
		return "", fmt.Errorf("unknown Cilium binary %q", name)
	}
	if bin := os.Getenv(envVar); bin != "" {
		return bin, nil
	}
	root, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		return "", err
	}
	cmd := exec.Command(filepath.Join(strings.TrimSpace(string(root)), "hack", "cilium", "build.sh"), name)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("building %s: %w", name, err)
	}
	return strings.TrimSpace(string(out)), nil
}
