// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package config

import (
	"encoding/json"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	gardencorev1beta1 "github.com/gardener/gardener/pkg/apis/core/v1beta1"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/apis/exposure"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/exposure/ciliumconfig"
)

// NetworkingType is the Shoot's networking type whose Cilium the exposure uses: Gardener's networking-cilium.
const NetworkingType = "cilium"

// networkConfig holds the fields of networking-cilium's NetworkConfig (the Shoot's spec.networking.providerConfig,
// cilium.networking.extensions.gardener.cloud/v1alpha1, pkg/apis/cilium/v1alpha1/types_network.go) that decide
// whether Cilium can announce the VIP. networking-cilium renders `enable-l2-announcements` and the agent's RBAC on
// leases only for l2Announcements.enabled, and `enable-bgp-control-plane` only for bgpControlPlane.enabled
// (pkg/charts/utils.go, charts/internal/cilium/charts/agent/templates/clusterrole.yaml).
type networkConfig struct {
	L2Announcements *struct {
		Enabled            bool             `json:"enabled"`
		LeaseDuration      *metav1.Duration `json:"leaseDuration,omitempty"`
		LeaseRenewDeadline *metav1.Duration `json:"leaseRenewDeadline,omitempty"`
		LeaseRetryPeriod   *metav1.Duration `json:"leaseRetryPeriod,omitempty"`
	} `json:"l2Announcements,omitempty"`
	BGPControlPlane *struct {
		Enabled bool `json:"enabled"`
	} `json:"bgpControlPlane,omitempty"`
}

// decodeNetworkConfig decodes the Shoot's networking providerConfig; none decodes to an empty one.
func decodeNetworkConfig(shoot *gardencorev1beta1.Shoot) (*networkConfig, error) {
	nc := &networkConfig{}
	if shoot == nil || shoot.Spec.Networking == nil || shoot.Spec.Networking.ProviderConfig == nil || len(shoot.Spec.Networking.ProviderConfig.Raw) == 0 {
		return nc, nil
	}
	return nc, json.Unmarshal(shoot.Spec.Networking.ProviderConfig.Raw, nc)
}

// L2LeaseTimings are the exposure's L2 lease timings as `cilium-config` settings, less those the Shoot's NetworkConfig
// sets itself (l2Announcements.leaseDuration, ...): networking-cilium renders those, and an operator's explicit
// setting there wins. Without them, networking-cilium's chart renders Cilium's defaults (15s/5s/2s), which leave
// kube-apiserver unreachable about three times as long when the announcing node fails (docs/datapath.md).
func L2LeaseTimings(shoot *gardencorev1beta1.Shoot, cfg *exposure.ExposureConfig) map[string]string {
	timings := ciliumconfig.LeaseTimings(cfg)
	nc, err := decodeNetworkConfig(shoot)
	if err != nil || nc.L2Announcements == nil {
		return timings
	}
	for key, set := range map[string]bool{
		ciliumconfig.KeyL2LeaseDuration:      nc.L2Announcements.LeaseDuration != nil,
		ciliumconfig.KeyL2LeaseRenewDeadline: nc.L2Announcements.LeaseRenewDeadline != nil,
		ciliumconfig.KeyL2LeaseRetryPeriod:   nc.L2Announcements.LeaseRetryPeriod != nil,
	} {
		if set {
			delete(timings, key)
		}
	}
	return timings
}

// CheckPrerequisites checks that the shoot's networking gives Cilium what the announcement needs: networking-cilium,
// its L2 announcer or BGP control plane, and kube-proxy replacement, which networking-cilium switches on only when
// the shoot runs without kube-proxy (pkg/charts/utils.go) and without which Cilium's L2 announcer does not answer
// for the VIP. Each error names the Shoot field and the value to set.
func CheckPrerequisites(shoot *gardencorev1beta1.Shoot, cfg *exposure.ExposureConfig) error {
	networking := field.NewPath("shoot", "spec", "networking")
	if shoot == nil || shoot.Spec.Networking == nil || shoot.Spec.Networking.Type == nil || *shoot.Spec.Networking.Type != NetworkingType {
		var value any = nil
		if shoot != nil && shoot.Spec.Networking != nil && shoot.Spec.Networking.Type != nil {
			value = *shoot.Spec.Networking.Type
		}
		return field.Invalid(networking.Child("type"), value, "the cilium exposure announces the VIP with Gardener's networking-cilium: set it to "+NetworkingType)
	}
	allErrs := field.ErrorList{}
	providerConfig := networking.Child("providerConfig")
	nc, err := decodeNetworkConfig(shoot)
	if err != nil {
		return field.Invalid(providerConfig, string(shoot.Spec.Networking.ProviderConfig.Raw), "not networking-cilium's NetworkConfig: "+err.Error())
	}
	switch cfg.Announcement {
	case exposure.AnnouncementL2:
		if nc.L2Announcements == nil || !nc.L2Announcements.Enabled {
			allErrs = append(allErrs, field.Invalid(providerConfig.Child("l2Announcements", "enabled"), nc.L2Announcements != nil && nc.L2Announcements.Enabled,
				"announcement L2 needs Cilium's L2 announcer: set it to true, so that networking-cilium enables it and grants the agents the leases it takes"))
		}
	case exposure.AnnouncementBGP:
		if nc.BGPControlPlane == nil || !nc.BGPControlPlane.Enabled {
			allErrs = append(allErrs, field.Invalid(providerConfig.Child("bgpControlPlane", "enabled"), nc.BGPControlPlane != nil && nc.BGPControlPlane.Enabled,
				"announcement BGP needs Cilium's BGP control plane: set it to true, so that networking-cilium enables it"))
		}
	}
	// Gardener defaults kubeProxy.enabled to true.
	if kp := shoot.Spec.Kubernetes.KubeProxy; kp == nil || kp.Enabled == nil || *kp.Enabled {
		allErrs = append(allErrs, field.Invalid(field.NewPath("shoot", "spec", "kubernetes", "kubeProxy", "enabled"), true,
			"the exposure needs Cilium's kube-proxy replacement, which networking-cilium switches on only without kube-proxy: set it to false"))
	}
	if len(allErrs) > 0 {
		return fmt.Errorf("the shoot's networking cannot announce the VIP: %w", allErrs.ToAggregate())
	}
	return nil
}
