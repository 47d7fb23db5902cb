// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

// Command generate-controller-registration writes the registrations of example/ from the chart: the
// ControllerDeployment with the chart inlined and the ControllerRegistration (controller-registration.yaml), and the
// operator Extension of the chart's OCI repository (extension.yaml).
package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/gardener/gardener-extension-cilium-selfhosted/charts"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run() error {
	registration, err := charts.ControllerRegistration()
	if err != nil {
		return err
	}
	if err := os.WriteFile("example/controller-registration.yaml", registration, 0o644); err != nil {
		return err
	}
	version, err := os.ReadFile("VERSION")
	if err != nil {
		return err
	}
	extension, err := charts.ExampleExtension(strings.TrimSpace(string(version)))
	if err != nil {
		return err
	}
	return os.WriteFile("example/extension.yaml", extension, 0o644)
}
