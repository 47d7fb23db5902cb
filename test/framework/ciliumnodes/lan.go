// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package ciliumnodes

import (
	"fmt"
	"slices"

	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/podrun"
)

// lan is the shoot's node network: a bridge in a namespace of its own ("the switch"), and one namespace per node and
// for the client, each with an eth0 on the bridge. Nothing is connected to the machine's network.
type lan struct {
	prefix string
	sw     *podrun.Netns
	hosts  []*podrun.Netns
}

// prefixLen is the node network's prefix length; its addresses are the fixture nodes' InternalIPs (10.0.0.0/16).
const prefixLen = "/16"

func newLAN(prefix string) (*lan, error) {
	sw, err := podrun.NewNetns(prefix + "-lan")
	if err != nil {
		return nil, err
	}
	l := &lan{prefix: prefix, sw: sw}
	if err := sw.IP("link", "add", "br0", "type", "bridge"); err != nil {
		l.close()
		return nil, err
	}
	if err := sw.IP("link", "set", "br0", "up"); err != nil {
		l.close()
		return nil, err
	}
	return l, nil
}

// attach creates the namespace of a host with address ip on its eth0, plugged into the bridge.
func (l *lan) attach(name, ip string) (*podrun.Netns, error) {
	ns, err := podrun.NewNetns(l.prefix + "-" + name)
	if err != nil {
		return nil, err
	}
	l.hosts = append(l.hosts, ns)
	port := "v-" + name
	for _, args := range [][]string{
		{"link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns.Name()},
		{"link", "set", port, "master", "br0", "up"},
	} {
		if err := l.sw.IP(args...); err != nil {
			return nil, fmt.Errorf("plugging %s in: %w", name, err)
		}
	}
	for _, args := range [][]string{{"addr", "add", ip + prefixLen, "dev", "eth0"}, {"link", "set", "eth0", "up"}} {
		if err := ns.IP(args...); err != nil {
			return nil, fmt.Errorf("configuring %s: %w", name, err)
		}
	}
	return ns, nil
}

// detach deletes the namespace of a host that attach created, and with it its port on the bridge.
func (l *lan) detach(ns *podrun.Netns) {
	ns.Delete()
	l.hosts = slices.DeleteFunc(l.hosts, func(h *podrun.Netns) bool { return h == ns })
}

// setPort lets the switch forward frames to and from name's port, or stops it, the link staying up: a port that
// forwards nothing stands for a node that hangs (a hung kernel, a stuck NIC), which neither takes nor sends anything,
// ARP and whatever its BPF programs would still answer included. The switch keeps the node's MAC address, so that
// frames for it keep going to the dead port, as a real switch's do until its MAC table ages them out (300 s).
func (l *lan) setPort(name string, forwarding bool) error {
	state := "0" // disabled (linux/if_bridge.h BR_STATE_DISABLED)
	if forwarding {
		state = "3" // BR_STATE_FORWARDING
	}
	if out, err := l.sw.Command("bridge", "link", "set", "dev", "v-"+name, "state", state).CombinedOutput(); err != nil {
		return fmt.Errorf("setting the state of %s's switch port to %s: %w: %s", name, state, err, out)
	}
	return nil
}

// close deletes every namespace, and with them the links.
func (l *lan) close() {
	for _, ns := range l.hosts {
		ns.Delete()
	}
	l.sw.Delete()
}
