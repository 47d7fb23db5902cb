// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

// Package config finds, decodes and validates the exposure configuration of a self-hosted shoot.
package config

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	gardencorev1beta1 "github.com/gardener/gardener/pkg/apis/core/v1beta1"
	extensionsv1alpha1 "github.com/gardener/gardener/pkg/apis/extensions/v1alpha1"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/addressing"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/apis/exposure"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/apis/exposure/helper"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/apis/exposure/validation"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/exposure/resources"
)

// Type is the exposure type this extension serves: `controlPlane.exposure.extension.type: cilium`.
const Type = "cilium"

// Raw finds the providerConfig: spec.providerConfig of the exposure (exp may be nil), else the shoot's
// controlPlane.exposure.extension.providerConfig, which gardener v1.150 does not copy into the exposure. It returns
// the field path it came from, for error messages.
func Raw(exp *extensionsv1alpha1.SelfHostedShootExposure, shoot *gardencorev1beta1.Shoot) (*runtime.RawExtension, *field.Path) {
	if exp != nil && exp.Spec.ProviderConfig != nil && len(exp.Spec.ProviderConfig.Raw) > 0 {
		return exp.Spec.ProviderConfig, field.NewPath("spec", "providerConfig")
	}
	if shoot == nil {
		return nil, field.NewPath("spec", "providerConfig")
	}
	i := slices.IndexFunc(shoot.Spec.Provider.Workers, func(w gardencorev1beta1.Worker) bool { return w.ControlPlane != nil })
	if i < 0 {
		return nil, field.NewPath("spec", "providerConfig")
	}
	path := field.NewPath("shoot", "spec", "provider", "workers").Index(i).Child("controlPlane", "exposure", "extension", "providerConfig")
	if e := shoot.Spec.Provider.Workers[i].ControlPlane.Exposure; e != nil && e.Extension != nil && e.Extension.ProviderConfig != nil && len(e.Extension.ProviderConfig.Raw) > 0 {
		return e.Extension.ProviderConfig, path
	}
	return nil, path
}

// Families are the shoot's IP families; a shoot without networking settings is IPv4.
func Families(shoot *gardencorev1beta1.Shoot) []addressing.Family {
	if shoot == nil || shoot.Spec.Networking == nil || len(shoot.Spec.Networking.IPFamilies) == 0 {
		return []addressing.Family{addressing.IPv4}
	}
	families := make([]addressing.Family, 0, len(shoot.Spec.Networking.IPFamilies))
	for _, f := range shoot.Spec.Networking.IPFamilies {
		families = append(families, addressing.Family(f))
	}
	return families
}

// Exposure is the exposure configuration as a reconciliation uses it: the providerConfig, decoded, defaulted and
// validated, its pool parsed, and the shoot's IP families. Load derives it once.
type Exposure struct {
	Config   *exposure.ExposureConfig
	Pool     addressing.Pool
	Families []addressing.Family
}

// Site is what the extension knows of the shoot's network beyond the Shoot and the exposure, for validation.
type Site struct {
	// NodeAddresses are the addresses of the cluster's Nodes, workers included.
	NodeAddresses []netip.Addr
	// Gateways are the gateways of the default routes of the extension's own node (network.DefaultGateways).
	Gateways []netip.Addr
}

// Load finds, decodes (strictly) and validates the exposure configuration, on site as far as it is known. Every error
// names the field at fault.
func Load(exp *extensionsv1alpha1.SelfHostedShootExposure, shoot *gardencorev1beta1.Shoot, site Site) (*Exposure, error) {
	raw, path := Raw(exp, shoot)
	if raw == nil {
		return nil, field.Required(path, "the cilium exposure needs a providerConfig with at least `pool` (apiVersion: "+
			exposure.GroupName+"/v1alpha1, kind: ExposureConfig)")
	}
	cfg, err := helper.Decode(raw.Raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	env := Environment(exp, shoot)
	env.OtherNodeAddresses, env.Gateways = site.NodeAddresses, site.Gateways
	if errs := validation.ValidateExposureConfig(cfg, env, path); len(errs) > 0 {
		return nil, errs.ToAggregate()
	}
	pool, errs := validation.ParsePool(cfg.Pool, path.Child("pool"))
	if len(errs) > 0 {
		return nil, errs.ToAggregate()
	}
	return &Exposure{Config: cfg, Pool: pool, Families: env.Families}, nil
}

// Input is what the builders of the exposure's objects need of exp with this configuration.
func (e *Exposure) Input(exp *extensionsv1alpha1.SelfHostedShootExposure) resources.Input {
	return resources.Input{Name: exp.Name, Namespace: exp.Namespace, Port: exp.Spec.Port, Endpoints: exp.Spec.Endpoints,
		Families: e.Families, Config: e.Config}
}

// Environment is what the configuration is validated against: the shoot's IP families and networks, the
// control-plane nodes' addresses in the exposure (exp may be nil), and the labels that make the exposure's objects
// its own.
func Environment(exp *extensionsv1alpha1.SelfHostedShootExposure, shoot *gardencorev1beta1.Shoot) validation.Environment {
	env := validation.Environment{Families: Families(shoot), ReservedLabels: slices.Sorted(maps.Keys(resources.Labels("", "")))}
	if shoot != nil && shoot.Spec.Networking != nil {
		networking := field.NewPath("shoot", "spec", "networking")
		for _, n := range []struct {
			name  string
			cidr  *string
			nodes bool
		}{{"nodes", shoot.Spec.Networking.Nodes, true}, {"pods", shoot.Spec.Networking.Pods, false}, {"services", shoot.Spec.Networking.Services, false}} {
			if n.cidr == nil {
				continue
			}
			if prefix, err := netip.ParsePrefix(*n.cidr); err == nil {
				env.Networks = append(env.Networks, validation.Network{Path: networking.Child(n.name), Prefix: prefix, Nodes: n.nodes})
			}
		}
	}
	if exp != nil {
		for _, e := range exp.Spec.Endpoints {
			for _, a := range e.Addresses {
				if addr, err := netip.ParseAddr(a.Address); err == nil && (a.Type == corev1.NodeInternalIP || a.Type == corev1.NodeExternalIP) {
					env.NodeAddresses = append(env.NodeAddresses, addr)
				}
			}
		}
	}
	return env
}

// String is a short description for logs.
func (e *Exposure) String() string {
	return fmt.Sprintf("announcement=%s pool=%v pinned=%v families=%v", e.Config.Announcement, e.Config.Pool, e.Config.LoadBalancerIPs, e.Families)
}
