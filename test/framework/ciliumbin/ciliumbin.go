// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

// Package ciliumbin finds Cilium's binaries that tests run: built from the cilium module pinned in hack/cilium by its
// build.sh into the tool cache, or given by an environment variable.
package ciliumbin

import (
	"debug/buildinfo"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/cilium"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/repo"
)

// Binaries Path knows, each with the environment variable that overrides it.
const (
	Operator = "cilium-operator"
	Dbg      = "cilium-dbg"
	Agent    = "cilium-agent"
	CNI      = "cilium-cni"
)

var envVars = map[string]string{Operator: "CILIUM_OPERATOR", Dbg: "CILIUM_DBG", Agent: "CILIUM_AGENT", CNI: "CILIUM_CNI"}

// Path is the binary name: its environment variable, else what hack/cilium/build.sh builds or has cached.
func Path(name string) (string, error) {
	envVar, ok := envVars[name]
	if !ok {
		return "", fmt.Errorf("unknown Cilium binary %q", name)
	}
	if bin := os.Getenv(envVar); bin != "" {
		return bin, nil
	}
	return repo.Script("hack/cilium/build.sh", name)
}

// PathFor is the binary name of the Cilium release that image runs: Path's when that is of the same minor release
// (or image names no version), else the one of image's minor, from its environment variable with the minor appended
// (CILIUM_AGENT_1_20) or from what build.sh builds or has cached for that minor. A container runs what its image holds.
func PathFor(name, image string) (string, error) {
	bin, err := Path(name)
	if err != nil {
		return "", err
	}
	want, ok := cilium.VersionFromImage(image)
	if !ok {
		return bin, nil
	}
	have, err := Version(bin)
	if err != nil {
		return "", err
	}
	line := minor(want.String())
	if minor(have) == line {
		return bin, nil
	}
	if bin := os.Getenv(envVars[name] + "_" + strings.ReplaceAll(line, ".", "_")); bin != "" {
		return bin, nil
	}
	return repo.Script("hack/cilium/build.sh", name, line)
}

// minor is the major and minor part of a version: 1.20 of 1.20.2.
func minor(version string) string {
	parts := strings.SplitN(version, ".", 3)
	if len(parts) < 2 {
		return version
	}
	return parts[0] + "." + parts[1]
}

// Version is the Cilium version a binary was built from: the version of the github.com/cilium/cilium module in its build
// information (hack/cilium builds it from a wrapper module, so Cilium is a dependency there), without the leading v.
func Version(path string) (string, error) {
	info, err := buildinfo.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("reading the build information of %s: %w", path, err)
	}
	for _, dep := range info.Deps {
		if dep.Path == "github.com/cilium/cilium" {
			if dep.Replace != nil {
				dep = dep.Replace
			}
			return strings.TrimPrefix(dep.Version, "v"), nil
		}
	}
	if info.Main.Path == "github.com/cilium/cilium" && strings.HasPrefix(info.Main.Version, "v") {
		return strings.TrimPrefix(info.Main.Version, "v"), nil
	}
	return "", fmt.Errorf("%s was not built from a released github.com/cilium/cilium module", path)
}

// Built is the prerequisite (a testenv.Prerequisite) of a suite that runs the binaries names: each is built if missing.
func Built(names ...string) func() error {
	return func() error {
		for _, name := range names {
			if _, err := Path(name); err != nil {
				return err
			}
		}
		return nil
	}
}

// BuiltFor is Built for the binaries of Cilium version (PathFor an image of that version).
func BuiltFor(version string, names ...string) func() error {
	return func() error {
		for _, name := range names {
			if _, err := PathFor(name, "cilium:v"+version); err != nil {
				return err
			}
		}
		return nil
	}
}

// ForContainer is the binary that c's command runs, if it is one of Cilium's that Path knows.
func ForContainer(c corev1.Container) (string, bool) {
	if len(c.Command) == 0 {
		return "", false
	}
	switch cmd := filepath.Base(c.Command[0]); {
	case strings.HasPrefix(cmd, Operator): // cilium-operator-generic in upstream's chart
		return Operator, true
	case cmd == Dbg:
		return Dbg, true
	case cmd == Agent:
		return Agent, true
	}
	return "", false
}
