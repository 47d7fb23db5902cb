// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package ciliumnodes

import (
	"context"
	"encoding/binary"
	"net"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/fixtures"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/podrun"
)

// hopCapture records which node the router forwarded each connection from the remote client to the VIP to, by the
// source port of its SYN: read from the frames the router sends on the nodes' segment (a packet socket on its
// eth0), by their destination MAC. The router picks a path of its multipath route by the packet's flow hash, and for
// a connection that hash is its socket's random one (the kernel keeps skb->hash across the veth; a NIC's RSS hash
// plays that part on a real router), so `ip route get` with the ports does not say where a connection goes.
type hopCapture struct {
	fd int
	// nodeByMAC is the nodes' eth0 MACs, each with its InternalIP.
	nodeByMAC map[string]string
	mu        sync.Mutex
	hops      map[uint16]string
	// stopping ends the capture, done says it ended.
	stopping, done chan struct{}
}

func startHopCapture(ns *podrun.Netns, nodeByMAC map[string]string) (*hopCapture, error) {
	// Only a socket for every protocol sees the frames a device sends (the kernel hands those to ptype_all taps).
	fd, _, err := packetSocket(ns, unix.ETH_P_ALL)
	if err != nil {
		return nil, err
	}
	// The read wakes up every 100 ms to see whether the capture was stopped.
	tv := unix.NsecToTimeval((100 * time.Millisecond).Nanoseconds())
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		unix.Close(fd)
		return nil, err
	}
	h := &hopCapture{fd: fd, nodeByMAC: nodeByMAC, hops: map[uint16]string{}, stopping: make(chan struct{}), done: make(chan struct{})}
	go h.read()
	return h, nil
}

func (h *hopCapture) read() {
	defer close(h.done)
	vip := net.ParseIP(fixtures.ExposureVIP).To4()
	client := net.ParseIP(RemoteClientIP).To4()
	frame := make([]byte, 128)
	for {
		select {
		case <-h.stopping:
			return
		default:
		}
		n, from, err := unix.Recvfrom(h.fd, frame, 0)
		if err != nil {
			continue // the receive timeout, or an interrupted call
		}
		ll, ok := from.(*unix.SockaddrLinklayer)
		if !ok || ll.Pkttype != unix.PACKET_OUTGOING || n < 14+20 || binary.BigEndian.Uint16(frame[12:14]) != unix.ETH_P_IP {
			continue
		}
		ip := frame[14:n]
		ihl := int(ip[0]&0x0f) * 4
		if ip[9] != unix.IPPROTO_TCP || !net.IP(ip[12:16]).Equal(client) || !net.IP(ip[16:20]).Equal(vip) || len(ip) < ihl+14 {
			continue
		}
		tcp := ip[ihl:]
		if flags := tcp[13]; flags&0x02 == 0 || flags&0x10 != 0 { // SYN without ACK
			continue
		}
		sport := binary.BigEndian.Uint16(tcp[0:2])
		mac := net.HardwareAddr(frame[0:6]).String()
		node, ok := h.nodeByMAC[mac]
		if !ok {
			node = mac
		}
		// The last SYN wins: the kernel gives a socket a new flow hash when its SYN times out, so a retransmission
		// can take another path, and the one answered is the last.
		h.mu.Lock()
		h.hops[sport] = node
		h.mu.Unlock()
	}
}

// hop is the node (InternalIP) the router forwarded the connection from sport to, "" when it forwarded none within
// a second. A port's hop is forgotten once read, for the next connection from it.
func (h *hopCapture) hop(ctx context.Context, sport int) string {
	var node string
	_ = wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, time.Second, true, func(context.Context) (bool, error) {
		h.mu.Lock()
		defer h.mu.Unlock()
		var ok bool
		node, ok = h.hops[uint16(sport)]
		if ok {
			delete(h.hops, uint16(sport))
		}
		return ok, nil
	})
	return node
}

func (h *hopCapture) stop() {
	close(h.stopping)
	<-h.done
	unix.Close(h.fd)
}
