// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

// Command kube-controller-manager is the upstream kube-controller-manager, built from the k8s.io/kubernetes module: the
// suites that need Kubernetes' own workload controllers (DaemonSet, Deployment, ReplicaSet rollouts) run it.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-controller-manager/app"
)

func main() {
	os.Exit(cli.Run(app.NewControllerManagerCommand()))
}
