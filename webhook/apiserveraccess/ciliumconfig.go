// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package apiserveraccess

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	v1beta1helper "github.com/gardener/gardener/pkg/api/core/v1beta1/helper"
	gardencorev1beta1 "github.com/gardener/gardener/pkg/apis/core/v1beta1"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/cilium"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/exposure/ciliumconfig"
	exposureconfig "github.com/gardener/gardener-extension-cilium-selfhosted/pkg/exposure/config"
)

// mutateCiliumConfig changes `cilium-config`, which every agent and the operator read as their config directory: it
// removes the API server options (cleanConfig) and, for a cilium exposure, completes what the exposure needs.
func (m *mutator) mutateCiliumConfig(ctx context.Context, ciliumConfig *corev1.ConfigMap, shoot *gardencorev1beta1.Shoot) {
	cleanConfig(ciliumConfig.Data)
	completeForExposure(ctx, ciliumConfig, shoot)
}

// cleanConfig removes the API server options from the `cilium-config` data. `k8s-api-server` is an option of its own
// that the pinned environment does not override and that replaces the URL list (1.17-1.19, rest_config_provider.go
// parseConfig; cell.go createConfig in 1.17); `k8s-kubeconfig-path` (Gardener's chart renders it from
// global.kubeConfigPath) beats any URL; and `k8s-api-server-urls` is overridden by CILIUM_K8S_API_SERVER_URLS, but
// would still name the VIP or the external domain to a container that is not pinned. An empty environment variable
// cannot unset them: viper ignores empty ones.
func cleanConfig(data map[string]string) {
	for _, key := range cilium.APIServerFlags {
		delete(data, key)
	}
}

// completeForExposure completes `cilium-config` for a cilium exposure of the shoot: the exposure's L2 lease timings,
// except those the Shoot's NetworkConfig sets, and the client rate limit the announcer needs (ciliumconfig.Complete).
// It switches no feature on. A configuration that does not load is left to the exposure to report: refusing Cilium's
// configuration for it would keep the cluster's network from coming up.
func completeForExposure(ctx context.Context, ciliumConfig *corev1.ConfigMap, shoot *gardencorev1beta1.Shoot) {
	if !v1beta1helper.HasExtensionExposure(shoot) || v1beta1helper.SelfHostedShootExposureExtensionType(shoot) != exposureconfig.Type {
		return
	}
	loaded, err := exposureconfig.Load(nil, shoot, exposureconfig.Site{})
	if err != nil {
		logf.FromContext(ctx).Info("Not completing cilium-config for the exposure: its configuration does not load", "error", err.Error())
		return
	}
	if ciliumConfig.Data == nil {
		ciliumConfig.Data = map[string]string{}
	}
	ciliumconfig.Complete(ciliumConfig.Data, exposureconfig.L2LeaseTimings(shoot, loaded.Config))
}
