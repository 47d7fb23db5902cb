// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package ciliumchart

import (
	"context"
	"fmt"
	"sync"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/cilium"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/scheme"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/fixtures"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/helm"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/repo"
)

// GardenerChartEnv names a directory of Gardener's networking-cilium chart (charts/internal/cilium of
// gardener/gardener-extension-networking-cilium at the commit hack/networking-cilium/chart.sh pins) to use instead of
// the one that script fetches.
const GardenerChartEnv = "NETWORKING_CILIUM_CHART"

// GardenerVersion is the Cilium release networking-cilium's image vector deploys with the chart it ships
// (imagevector/images.yaml of the pinned commit).
const GardenerVersion = "1.19.7"

// GardenerChartScript finds networking-cilium's chart, checks it against the pin and says which copy it is.
const GardenerChartScript = "hack/networking-cilium/chart.sh"

// GardenerChartDir returns the directory of networking-cilium's chart as hack/networking-cilium/chart.sh finds it:
// $NETWORKING_CILIUM_CHART, the copy it fetched into the tool cache, or the reference copy beside this repository, each
// checked against the pinned tree. The script's report of which copy it is goes to stderr once per test binary.
var GardenerChartDir = sync.OnceValues(func() (string, error) { return repo.Script(GardenerChartScript) })

// GardenerChart is the prerequisite of the suites that render networking-cilium's chart (a testenv.Prerequisite).
func GardenerChart() error {
	_, err := GardenerChartDir()
	return err
}

// GardenerValues are the values networking-cilium computes (pkg/charts/utils.go generateChartValues) for a self-hosted
// shoot that disables kube-proxy and enables L2 announcements and the BGP control plane (test/framework/fixtures.NetworkConfig):
// kube-proxy replacement with the health-check server,
// NodePort, k8sServiceHost taken from the shoot's external advertised address, and images tagged with the Cilium
// version. Only what differs from the chart's values.yaml is set.
func GardenerValues(version string) map[string]any {
	return map[string]any{
		"global": map[string]any{
			"kubeProxyReplacement":                true,
			"kubeProxyReplacementHealthzBindAddr": "0.0.0.0:10256",
			"nodePort": map[string]any{
				"enabled": true, "enableHealthCheck": true, "enableHealthCheckLoadBalancerIP": true, "autoProtectPortRange": true,
			},
			"k8sServiceHost":  ExternalHost,
			"k8sServicePort":  443,
			"l2announcements": map[string]any{"enabled": true},
			"bgpControlPlane": map[string]any{"enabled": true},
			"podCIDR":         "100.64.0.0/12",
			"nodeCIDR":        "10.0.0.0/16", // test/framework/fixtures.NodeNetwork
			"ipam":            map[string]any{"mode": "kubernetes"},
			"images": map[string]any{
				"cilium-agent":    "europe-docker.pkg.dev/gardener-project/releases/cilium/cilium:v" + version,
				"cilium-operator": "europe-docker.pkg.dev/gardener-project/releases/cilium/operator:v" + version,
				"cilium-envoy":    "europe-docker.pkg.dev/gardener-project/releases/cilium/cilium-envoy:v1.35.9",
				"kube-proxy":      "registry.k8s.io/kube-proxy:v" + fixtures.KubernetesVersion,
			},
		},
	}
}

// RenderGardener renders networking-cilium's chart as that extension does (release cilium in kube-system, Gardener's
// chart renderer) with values.
func RenderGardener(version string, values map[string]any) (*Objects, error) {
	dir, err := GardenerChartDir()
	if err != nil {
		return nil, err
	}
	rendered, _, err := helm.RenderAsGardener(dir, "cilium", cilium.Namespace, values, scheme.New())
	if err != nil {
		return nil, fmt.Errorf("networking-cilium's chart: %w", err)
	}
	return collect("networking-cilium's chart", version, rendered)
}

// CreateGardenerConfig creates the cilium-config of networking-cilium's chart in c, which an exposure checks, unless
// it exists.
func CreateGardenerConfig(ctx context.Context, c client.Client) error {
	rendered, err := RenderGardener(GardenerVersion, GardenerValues(GardenerVersion))
	if err != nil {
		return err
	}
	return client.IgnoreAlreadyExists(c.Create(ctx, rendered.Config.DeepCopy()))
}
