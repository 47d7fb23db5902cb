// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

// Command gardener-extension-cilium-selfhosted makes Cilium safe and useful on Gardener self-hosted shoots.
package main

import (
	"os"

	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager/signals"

	"github.com/gardener/gardener/pkg/logger"

	"github.com/gardener/gardener-extension-cilium-selfhosted/cmd/gardener-extension-cilium-selfhosted/app"
)

func main() {
	logf.SetLogger(logger.MustNewZapLogger(logger.InfoLevel, logger.FormatJSON))

	if err := app.NewCommand(signals.SetupSignalHandler()).Execute(); err != nil {
		logf.Log.Error(err, "Error executing the main controller command")
		os.Exit(1)
	}
}
