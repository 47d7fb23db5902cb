// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

// Package network holds the address types the exposure works with: the shoot's IP families and the parsed address
// pool of the VIP.
package network

import (
	"fmt"
	"net/netip"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/apis/exposure"
)

// Family is an IP family of the shoot: "IPv4" or "IPv6".
type Family string

const (
	IPv4 Family = "IPv4"
	IPv6 Family = "IPv6"
)

// FamilyOf is the family of an address.
func FamilyOf(a netip.Addr) Family {
	if a.Is4() {
		return IPv4
	}
	return IPv6
}

// Pool is a parsed address pool.
type Pool struct {
	Prefixes []netip.Prefix
	Ranges   [][2]netip.Addr
}

// ParsePool parses and checks the CIDRs and ranges of a pool.
func ParsePool(p exposure.Pool, fldPath *field.Path) (Pool, field.ErrorList) {
	var (
		pool    Pool
		allErrs field.ErrorList
	)
	if len(p.CIDRs) == 0 && len(p.Ranges) == 0 {
		return pool, field.ErrorList{field.Required(fldPath, "the pool needs at least one CIDR or range")}
	}
	for i, c := range p.CIDRs {
		prefix, err := netip.ParsePrefix(c)
		if err != nil {
			allErrs = append(allErrs, field.Invalid(fldPath.Child("cidrs").Index(i), c, "not a CIDR"))
			continue
		}
		if prefix != prefix.Masked() {
			allErrs = append(allErrs, field.Invalid(fldPath.Child("cidrs").Index(i), c, fmt.Sprintf("host bits are set (did you mean %s?)", prefix.Masked())))
			continue
		}
		pool.Prefixes = append(pool.Prefixes, prefix)
	}
	for i, r := range p.Ranges {
		rp := fldPath.Child("ranges").Index(i)
		start, errStart := netip.ParseAddr(r.Start)
		stop, errStop := netip.ParseAddr(r.Stop)
		switch {
		case errStart != nil:
			allErrs = append(allErrs, field.Invalid(rp.Child("start"), r.Start, "not an IP address"))
		case errStop != nil:
			allErrs = append(allErrs, field.Invalid(rp.Child("stop"), r.Stop, "not an IP address"))
		case start.Is4() != stop.Is4():
			allErrs = append(allErrs, field.Invalid(rp, r, "start and stop are of different IP families"))
		case stop.Less(start):
			allErrs = append(allErrs, field.Invalid(rp, r, "stop is before start"))
		default:
			pool.Ranges = append(pool.Ranges, [2]netip.Addr{start, stop})
		}
	}
	return pool, allErrs
}

// Contains tells whether addr lies in the pool.
func (p Pool) Contains(addr netip.Addr) bool {
	for _, prefix := range p.Prefixes {
		if prefix.Contains(addr) {
			return true
		}
	}
	for _, r := range p.Ranges {
		if !addr.Less(r[0]) && !r[1].Less(addr) {
			return true
		}
	}
	return false
}

// Has tells whether the pool offers addresses of family f.
func (p Pool) Has(f Family) bool {
	for _, prefix := range p.Prefixes {
		if FamilyOf(prefix.Addr()) == f {
			return true
		}
	}
	for _, r := range p.Ranges {
		if FamilyOf(r[0]) == f {
			return true
		}
	}
	return false
}
