// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

// Package addressing holds the address types the exposure works with: the shoot's IP families and the parsed address
// pool of the VIP. It imports nothing of the project, so that the API's validation and the builders share it.
package addressing

import "net/netip"

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
