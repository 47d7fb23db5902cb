// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

// Package network reads the network of the extension's node: the gateways of its default routes.
package network

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// ProcNet is where the kernel tells a process the routes of its network namespace. The extension runs in the host
// network of a control-plane node, so these are the node's routes.
const ProcNet = "/proc/net"

// rtfGateway is the kernel's RTF_GATEWAY flag (include/uapi/linux/route.h): the route goes through a gateway.
const rtfGateway = 0x2

// DefaultGateways are the gateways of the default routes in procNet's route (IPv4) and ipv6_route (IPv6) tables,
// sorted and without duplicates: on a node of a bare-metal shoot, the node network's router. A table that does not
// exist (no IPv6) holds none.
func DefaultGateways(procNet string) ([]netip.Addr, error) {
	var gateways []netip.Addr
	for file, parse := range map[string]func([]string) (netip.Addr, bool){"route": defaultGateway4, "ipv6_route": defaultGateway6} {
		f, err := os.Open(filepath.Join(procNet, file))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		scanner := bufio.NewScanner(f)
		for scanner.Scan() {
			if gw, ok := parse(strings.Fields(scanner.Text())); ok {
				gateways = append(gateways, gw)
			}
		}
		err = scanner.Err()
		f.Close()
		if err != nil {
			return nil, err
		}
	}
	slices.SortFunc(gateways, netip.Addr.Compare)
	return slices.Compact(gateways), nil
}

// defaultGateway4 reads a line of /proc/net/route: Iface Destination Gateway Flags RefCnt Use Metric Mask ..., each
// address the hex of its network-order bytes read as a host-order number (net/ipv4/fib_trie.c fib_route_seq_show,
// %08X of a __be32). Of a multipath default route, the table shows the first next hop.
func defaultGateway4(fields []string) (netip.Addr, bool) {
	if len(fields) < 8 || fields[1] != "00000000" || fields[7] != "00000000" {
		return netip.Addr{}, false
	}
	flags, err := strconv.ParseUint(fields[3], 16, 32)
	if err != nil || flags&rtfGateway == 0 {
		return netip.Addr{}, false
	}
	raw, err := hex.DecodeString(fields[2])
	if err != nil || len(raw) != 4 {
		return netip.Addr{}, false
	}
	// The kernel prints the address's 32 bits as a number in the host's byte order.
	var a [4]byte
	binary.NativeEndian.PutUint32(a[:], binary.BigEndian.Uint32(raw))
	gw := netip.AddrFrom4(a)
	return gw, !gw.IsUnspecified()
}

// defaultGateway6 reads a line of /proc/net/ipv6_route: destination, its prefix length, source, its prefix length,
// next hop, metric, refcount, use, flags, device (net/ipv6/route.c ipv6_route_native_seq_show).
func defaultGateway6(fields []string) (netip.Addr, bool) {
	if len(fields) < 10 || fields[1] != "00" || strings.Trim(fields[0], "0") != "" {
		return netip.Addr{}, false
	}
	raw, err := hex.DecodeString(fields[4])
	if err != nil || len(raw) != 16 {
		return netip.Addr{}, false
	}
	gw := netip.AddrFrom16([16]byte(raw))
	return gw, !gw.IsUnspecified()
}
