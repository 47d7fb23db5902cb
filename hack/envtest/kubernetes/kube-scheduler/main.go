// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

// Command kube-scheduler is the upstream kube-scheduler, built from the k8s.io/kubernetes module: the suites that need
// pods placed as on a real cluster (node selectors, taints, anti-affinity) run it.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
)

func main() {
	os.Exit(cli.Run(app.NewSchedulerCommand()))
}
