// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package network

import (
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestDefaultGateways reads the kernel's route tables as a node shows them: the IPv4 default route's gateway (in the
// kernel's byte order) and the IPv6 one's next hop; subnet routes, a default route without gateway flag and a missing
// IPv6 table give none.
func TestDefaultGateways(t *testing.T) {
	for name, tc := range map[string]struct {
		route, ipv6Route string
		want             []string
	}{
		"dual-stack node": {
			route: "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n" +
				"eth0\t00000000\t010200C0\t0003\t0\t0\t0\t00000000\t0\t0\t0\n" +
				"eth0\t000200C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n",
			ipv6Route: "fd000000000000000000000000000000 40 00000000000000000000000000000000 00 00000000000000000000000000000000 00000100 00000001 00000000 00000001     eth0\n" +
				"00000000000000000000000000000000 00 00000000000000000000000000000000 00 fd000000000000000000000000000001 00000400 00000003 00000000 00000003     eth0\n",
			want: []string{"192.0.2.1", "fd00::1"},
		},
		"IPv4 only, two uplinks to one router": {
			route: "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n" +
				"bond0\t00000000\t0100000A\t0003\t0\t0\t100\t00000000\t0\t0\t0\n" +
				"eth1\t00000000\t0100000A\t0003\t0\t0\t200\t00000000\t0\t0\t0\n",
			want: []string{"10.0.0.1"},
		},
		"default route on a device, no gateway": {
			route: "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n" +
				"wg0\t00000000\t00000000\t0001\t0\t0\t0\t00000000\t0\t0\t0\n",
		},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "route"), []byte(tc.route), 0o600); err != nil {
				t.Fatal(err)
			}
			if tc.ipv6Route != "" {
				if err := os.WriteFile(filepath.Join(dir, "ipv6_route"), []byte(tc.ipv6Route), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			got, err := DefaultGateways(dir)
			if err != nil {
				t.Fatal(err)
			}
			var want []netip.Addr
			for _, w := range tc.want {
				want = append(want, netip.MustParseAddr(w))
			}
			if !slices.Equal(got, want) {
				t.Errorf("gateways %v, want %v", got, want)
			}
		})
	}
}
