// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

// Package charts embeds the extension's Helm chart, for the ControllerDeployment and the tests.
package charts

import "embed"

// ChartPath is the chart's directory in FS.
const ChartPath = "gardener-extension-cilium-selfhosted"

// FS holds the chart.
//
//go:embed all:gardener-extension-cilium-selfhosted
var FS embed.FS
