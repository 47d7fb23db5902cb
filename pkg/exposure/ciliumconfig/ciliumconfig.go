// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

// Package ciliumconfig knows which `cilium-config` settings an exposure needs. The features come from the Shoot's
// NetworkConfig through networking-cilium, and the exposure checks that they arrived; the webhook only fills in the
// L2 lease timings the NetworkConfig leaves unset and keeps the agents' client rate limit at Cilium's defaults.
package ciliumconfig

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/apis/exposure"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/cilium"
)

// Keys of `cilium-config` (install/kubernetes/cilium/templates/cilium-configmap.yaml).
const (
	KeyLBIPAM               = "enable-lb-ipam"
	KeyL2Announcements      = "enable-l2-announcements"
	KeyL2LeaseDuration      = "l2-announcements-lease-duration"
	KeyL2LeaseRenewDeadline = "l2-announcements-renew-deadline"
	KeyL2LeaseRetryPeriod   = "l2-announcements-retry-period"
	KeyBGPControlPlane      = "enable-bgp-control-plane"
	KeyClientQPS            = "k8s-client-qps"
	KeyClientBurst          = "k8s-client-burst"
	minClientQPS, minBurst  = 10, 20
	enabled                 = "true"
	configMapRef            = "ConfigMap " + cilium.Namespace + "/" + cilium.ConfigMapName
)

// Switches are the feature switches the exposure needs: LB-IPAM always, and the L2 announcer or the BGP control
// plane.
func Switches(cfg *exposure.ExposureConfig) map[string]string {
	s := map[string]string{KeyLBIPAM: enabled}
	switch cfg.Announcement {
	case exposure.AnnouncementL2:
		s[KeyL2Announcements] = enabled
	case exposure.AnnouncementBGP:
		s[KeyBGPControlPlane] = enabled
	}
	return s
}

// LeaseTimings are the exposure's L2 lease timings as `cilium-config` settings (none for BGP).
func LeaseTimings(cfg *exposure.ExposureConfig) map[string]string {
	s := map[string]string{}
	if l2 := cfg.L2; cfg.Announcement == exposure.AnnouncementL2 && l2 != nil {
		if l2.LeaseDuration != nil {
			s[KeyL2LeaseDuration] = l2.LeaseDuration.Duration.String()
		}
		if l2.LeaseRenewDeadline != nil {
			s[KeyL2LeaseRenewDeadline] = l2.LeaseRenewDeadline.Duration.String()
		}
		if l2.LeaseRetryPeriod != nil {
			s[KeyL2LeaseRetryPeriod] = l2.LeaseRetryPeriod.Duration.String()
		}
	}
	return s
}

// Complete writes into the data of `cilium-config` the given L2 lease timings when the L2 announcer is on, and makes
// sure that the client rate limit is not below Cilium's defaults (10 QPS, burst 20), which the L2 announcer's lease
// renewals need (Cilium's L2 documentation sizes it as services / renew deadline). It switches no feature on: a
// feature the Shoot does not enable would lack the agents' RBAC and kube-proxy replacement, and report a success
// Cilium does not deliver.
func Complete(data, leaseTimings map[string]string) {
	// Timings without the announcer would only mislead whoever reads the ConfigMap.
	if data[KeyL2Announcements] == enabled {
		maps.Copy(data, leaseTimings)
	}
	for key, floor := range map[string]int{KeyClientQPS: minClientQPS, KeyClientBurst: minBurst} {
		if v, ok := data[key]; ok {
			if n, err := strconv.ParseFloat(v, 64); err == nil && n < float64(floor) {
				data[key] = strconv.Itoa(floor)
			}
		}
	}
}

// Check reports which switches the exposure needs are off in `cilium-config`. LB-IPAM is on unless switched off
// explicitly (its default is true).
func Check(data map[string]string, cfg *exposure.ExposureConfig) error {
	var off []string
	switches := Switches(cfg)
	for _, k := range slices.Sorted(maps.Keys(switches)) {
		v, ok := data[k]
		if k == KeyLBIPAM && !ok {
			continue
		}
		if v != switches[k] {
			off = append(off, fmt.Sprintf("%s=%q (needs %q)", k, v, switches[k]))
		}
	}
	if len(off) > 0 {
		return fmt.Errorf("%s does not enable what announcement %s needs: %s; networking-cilium renders them from the Shoot's "+
			"spec.networking.providerConfig, and the agents and operator pick them up when they restart",
			configMapRef, cfg.Announcement, strings.Join(off, ", "))
	}
	return nil
}
