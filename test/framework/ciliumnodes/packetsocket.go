// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package ciliumnodes

import (
	"net"

	"golang.org/x/sys/unix"

	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/podrun"
)

// packetSocket is a raw packet socket for the Ethernet protocol proto on ns's eth0, which sees the frames eth0 sends
// and receives whatever the kernel's tables make of them; it stays in ns.
func packetSocket(ns *podrun.Netns, proto uint16) (int, *net.Interface, error) {
	fd := -1
	var iface *net.Interface
	err := ns.Do(func() error {
		var err error
		if iface, err = net.InterfaceByName("eth0"); err != nil {
			return err
		}
		if fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(proto))); err != nil {
			return err
		}
		return unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(proto), Ifindex: iface.Index})
	})
	if err != nil && fd >= 0 {
		unix.Close(fd)
		fd = -1
	}
	return fd, iface, err
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }
