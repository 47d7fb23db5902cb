// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package ciliumnodes

import (
	"fmt"
	"os/exec"
	"strconv"
	"strings"

	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/fixtures"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/podrun"
)

// forbidden are the kube-apiserver addresses that Cilium provides and so must never be dialled by Cilium on a
// self-hosted shoot: the `kubernetes` ClusterIP and the VIP (the hosts file of every pod resolves the external API
// name to it, as DNS does).
var forbidden = []string{podrun.ClusterIP + ":443", fixtures.ExposureVIP + ":443"}

// attemptsChain is the iptables chain in each node's namespace that rejects and counts packets to forbidden.
const attemptsChain = "FORBIDDEN-APISERVER"

// countAttempts routes the forbidden addresses out of eth0, as a node's default route would (so that a dial is not
// refused by the routing table before anything sees it), and rejects and counts every packet the node sends to them.
// Cilium's socket load-balancing translates a connection to a Service address in connect(), before a packet exists:
// what is counted here are the dials it does not translate (before the agent's programs are attached, or on a node
// without them); a translated ClusterIP connection reaches the `kubernetes` Service's backend, which is a trap
// (ServiceBackendHits), and a translated VIP connection shows as a socket to a control-plane node (APIServerPeers).
func countAttempts(ns *podrun.Netns, route func(args ...string) error) error {
	for _, addr := range forbidden {
		ip, _, _ := strings.Cut(addr, ":")
		if err := route(ip+"/32", "dev", "eth0"); err != nil {
			return err
		}
	}
	rules := [][]string{{"-N", attemptsChain}, {"-I", "OUTPUT", "1", "-j", attemptsChain}}
	for _, addr := range forbidden {
		ip, port, _ := strings.Cut(addr, ":")
		rules = append(rules, []string{"-A", attemptsChain, "-d", ip + "/32", "-p", "tcp", "--dport", port, "-j", "REJECT", "--reject-with", "tcp-reset"})
	}
	for _, r := range rules {
		if out, err := iptables(ns, r...); err != nil {
			return fmt.Errorf("iptables %v: %w: %s", r, err, out)
		}
	}
	return nil
}

func iptables(ns *podrun.Netns, args ...string) ([]byte, error) {
	return exec.Command("ip", append([]string{"netns", "exec", ns.Name(), "iptables", "-w"}, args...)...).CombinedOutput()
}

// Attempts counts the packets the node sent to each forbidden address, by address.
func (n *Node) Attempts() (map[string]int, error) {
	out, err := iptables(n.sandbox.Netns(), "-L", attemptsChain, "-n", "-v", "-x")
	if err != nil {
		return nil, fmt.Errorf("%w: %s", err, out)
	}
	counts := map[string]int{}
	// pkts bytes target prot opt in out source destination [tcp dpt:443 reject-with ...]
	for _, line := range strings.Split(string(out), "\n")[2:] {
		f := strings.Fields(line)
		if len(f) < 11 || f[2] != "REJECT" {
			continue
		}
		pkts, err := strconv.Atoi(f[0])
		if err != nil {
			return nil, fmt.Errorf("%q: %w", line, err)
		}
		counts[f[8]+":"+strings.TrimPrefix(f[10], "dpt:")] += pkts
	}
	if len(counts) != len(forbidden) {
		return nil, fmt.Errorf("the chain %s of %s has %d rules, want %d:\n%s", attemptsChain, n.Name, len(counts), len(forbidden), out)
	}
	return counts, nil
}
