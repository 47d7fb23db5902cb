// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package ciliumnodes

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/podrun"
)

// arpInterval is how often arpWatch asks: the resolution of the ARP times it measures.
const arpInterval = 50 * time.Millisecond

// arpWatch asks from ns's eth0 who has ip every arpInterval, as a host whose neighbour entry failed does, and returns
// when a MAC address other than those in not answers, with that address and when the answer came; at ctx's end, an
// error.
func arpWatch(ctx context.Context, ns *podrun.Netns, ip string, not ...string) (string, time.Time, error) {
	var mac string
	var at time.Time
	err := arpAnswers(ctx, ns, ip, func(m string, t time.Time) bool {
		mac, at = m, t
		return !slices.Contains(not, m)
	})
	return mac, at, err
}

// arpAnswers asks from ns's eth0 who has ip every arpInterval and calls each with every answer's MAC address and when
// it came, until each returns true (nil) or ctx ends (its error). A raw socket of its own sees every answer, whatever
// the kernel's neighbour table makes of it.
func arpAnswers(ctx context.Context, ns *podrun.Netns, ip string, each func(mac string, at time.Time) bool) error {
	fd, iface, err := packetSocket(ns, unix.ETH_P_ARP)
	if err != nil {
		return fmt.Errorf("an ARP socket in %s: %w", ns.Name(), err)
	}
	defer unix.Close(fd)
	var source net.IP
	if err := ns.Do(func() error {
		addrs, err := iface.Addrs()
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil {
				source = n.IP.To4()
			}
		}
		return err
	}); err != nil || source == nil {
		return fmt.Errorf("no IPv4 address on %s's eth0: %v", ns.Name(), err)
	}
	target := net.ParseIP(ip).To4()
	request := arpFrame(iface.HardwareAddr, source, target)
	tv := unix.NsecToTimeval(arpInterval.Nanoseconds())
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return err
	}
	buf := make([]byte, 128)
	for next := time.Now(); ; {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if now := time.Now(); !now.Before(next) {
			if err := unix.Sendto(fd, request, 0, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ARP), Ifindex: iface.Index, Halen: 6, Addr: [8]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}}); err != nil {
				return err
			}
			next = now.Add(arpInterval)
		}
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			continue // the receive timeout: ask again
		}
		if mac, ok := arpReplyFrom(buf[:n], target); ok && each(mac, time.Now()) {
			return nil
		}
	}
}

// arpFrame is an Ethernet broadcast asking who has target, from mac and source.
func arpFrame(mac net.HardwareAddr, source, target net.IP) []byte {
	f := make([]byte, 0, 42)
	f = append(f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff)
	f = append(f, mac...)
	f = binary.BigEndian.AppendUint16(f, unix.ETH_P_ARP)
	f = binary.BigEndian.AppendUint16(f, 1)      // Ethernet
	f = binary.BigEndian.AppendUint16(f, 0x0800) // IPv4
	f = append(f, 6, 4)
	f = binary.BigEndian.AppendUint16(f, 1) // request
	f = append(f, mac...)
	f = append(f, source...)
	f = append(f, 0, 0, 0, 0, 0, 0)
	return append(f, target...)
}

// arpReplyFrom is the sender MAC of an ARP reply for target in the Ethernet frame f.
func arpReplyFrom(f []byte, target net.IP) (string, bool) {
	if len(f) < 42 || binary.BigEndian.Uint16(f[12:14]) != unix.ETH_P_ARP || binary.BigEndian.Uint16(f[20:22]) != 2 || !bytes.Equal(f[28:32], target) {
		return "", false
	}
	return net.HardwareAddr(f[22:28]).String(), true
}
