// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package testenv

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/reaper"
)

// Prerequisite is something a suite needs from the machine: nil when it is there, else an error that says in one
// line what is missing and what to run.
type Prerequisite func() error

// CPUPrefix begins the line in which a suite says, as it ends, the CPU time it and every process it started used;
// `make test` lists it beside the suite's time.
const CPUPrefix = "suite CPU: "

// CannotRunPrefix begins the one line a suite prints when a prerequisite is missing; `make test` lists these lines.
const CannotRunPrefix = "cannot run: "

// Check confines the binary (test/framework/reaper), so that what the checks start (a build, a fetch) dies with it too, and
// checks the prerequisites in turn, the cheap ones first: the first one missing is the error.
func Check(prerequisites ...Prerequisite) error {
	reaper.ConfineOrWarn()
	for _, p := range prerequisites {
		if err := p(); err != nil {
			return err
		}
	}
	return nil
}

// CannotRun prints the line that says why the suite cannot run, and returns the exit code for os.Exit.
func CannotRun(err error) int {
	fmt.Fprintf(os.Stderr, "%s %s%s\n", reaper.Suite(), CannotRunPrefix, strings.ReplaceAll(err.Error(), "\n", " "))
	return 1
}

// EnvtestAssets: kube-apiserver and etcd in KUBEBUILDER_ASSETS, which `make test` builds and sets.
func EnvtestAssets() error { return assets("kube-apiserver", "etcd") }

// KubernetesControllers: the suites that run Kubernetes' own kube-controller-manager and kube-scheduler beside
// kube-apiserver (hack/envtest/build.sh builds them into the same folder).
func KubernetesControllers() error { return assets("kube-controller-manager", "kube-scheduler") }

// Kubectl: the suites that run the kubectl steps of docs/usage/install.md, with the kubectl hack/envtest/build.sh
// builds into the same folder (KubectlPath).
func Kubectl() error { return assets("kubectl") }

// KubectlPath is that kubectl.
func KubectlPath() string { return filepath.Join(os.Getenv("KUBEBUILDER_ASSETS"), "kubectl") }

func assets(binaries ...string) error {
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		return errors.New("KUBEBUILDER_ASSETS is not set: run `make test`, or set it to the folder hack/envtest/build.sh prints")
	}
	for _, binary := range binaries {
		if _, err := os.Stat(filepath.Join(assets, binary)); err != nil {
			return fmt.Errorf("KUBEBUILDER_ASSETS=%s has no %s: run `make test`, or set it to the folder hack/envtest/build.sh prints", assets, binary)
		}
	}
	return nil
}

// Root: the suites (and the parts of the demo and the bench) that run Cilium in network and mount namespaces.
func Root() error {
	if os.Getuid() != 0 {
		return errors.New("running Cilium in network and mount namespaces needs root: run `sudo make test` (or `sudo make demo`)")
	}
	return nil
}
