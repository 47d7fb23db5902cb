// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package ciliumnodes

import (
	"time"

	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/testenv"
)

// APIServerRestart is a way the one control-plane node's kube-apiserver restarts (issue 44,
// docs/development/workload-pods.md).
type APIServerRestart struct {
	Name    string
	restart func(*testenv.Env) error
}

// APIServerRestarts are the restarts the policy scenario goes through: as kubelet restarts the static pod after its
// manifest changed (SIGTERM, kube-apiserver's 30 s grace period), and killed as a crash or the OOM killer does, with a
// minute's outage.
var APIServerRestarts = []APIServerRestart{
	{Name: "graceful", restart: func(e *testenv.Env) error { return e.RestartAPIServer(10 * time.Second) }},
	{Name: "killed, a minute down", restart: func(e *testenv.Env) error { return e.KillAPIServer(time.Minute) }},
}

// RestartAPIServer restarts kube-apiserver the way r says and then kube-controller-manager and kube-scheduler
// (RestartKubernetes), and returns once kube-apiserver is healthy again.
func (c *Cluster) RestartAPIServer(r APIServerRestart) error {
	if err := r.restart(c.env); err != nil {
		return err
	}
	return c.RestartKubernetes()
}

// RestartKubernetes restarts kube-controller-manager and kube-scheduler, as kubelet restarts their static pods after a
// kube-apiserver outage: in a shoot both run with leader election and exit once they cannot renew their leases; here
// they run without it and would otherwise wait out their informers' relist back-off (client-go's reflector, up to
// 30 s) before the DaemonSet controller acts again. It also forgets cilium-operator's crash-loop back-off, grown
// while the operator exited on its lost lease and failed to start during the outage, so that the next case finds the
// operator restarted at once, as on a fresh lane. Call it once kube-apiserver is back.
func (c *Cluster) RestartKubernetes() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.operatorCrashLoop = newCrashLoopBackOff()
	c.kubernetes.Stop()
	var err error
	c.kubernetes, err = c.env.RunKubernetes([]string{"daemonset-controller"})
	return err
}
