// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package testenv

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Kubernetes are Kubernetes' own kube-controller-manager and kube-scheduler (KubernetesControllers), running against
// the suite's kube-apiserver without leader election or serving ports.
type Kubernetes struct {
	ControllerManager, Scheduler *Process
}

// RunKubernetes starts kube-controller-manager with only controllers (their names as its --controllers flag takes
// them) and extra flags, and kube-scheduler. The caller stops them.
func (e *Env) RunKubernetes(controllers []string, extra ...string) (*Kubernetes, error) {
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	k := &Kubernetes{}
	var err error
	k.ControllerManager, err = StartProcess(filepath.Join(e.Dir, "kube-controller-manager.log"), filepath.Join(assets, "kube-controller-manager"),
		append([]string{"--kubeconfig=" + e.Kubeconfig, "--leader-elect=false", "--secure-port=0", "--controllers=" + strings.Join(controllers, ",")}, extra...)...)
	if err != nil {
		return nil, err
	}
	k.Scheduler, err = StartProcess(filepath.Join(e.Dir, "kube-scheduler.log"), filepath.Join(assets, "kube-scheduler"),
		"--kubeconfig="+e.Kubeconfig, "--leader-elect=false", "--secure-port=0")
	if err != nil {
		k.ControllerManager.Stop(context.Background())
		return nil, err
	}
	return k, nil
}

// Stop stops both.
func (k *Kubernetes) Stop() {
	k.ControllerManager.Stop(context.Background())
	k.Scheduler.Stop(context.Background())
}

// Logs are the tails of both logs, for a failing test.
func (k *Kubernetes) Logs() string {
	return fmt.Sprintf("--- kube-controller-manager ---\n%s\n--- kube-scheduler ---\n%s", k.ControllerManager.LogTail(20), k.Scheduler.LogTail(20))
}
