// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package ciliumnodes

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/podrun"
)

// TestStaticRoutesFollowTheLink: a node's static route goes with its link, as the kernel drops it, and comes back
// with the link, also when it was added while the link was down (the router of TestBGP can start while a node is
// failed), which the kernel would have refused.
func TestStaticRoutesFollowTheLink(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("network namespaces need root")
	}
	ns, err := podrun.NewNetns(fmt.Sprintf("routes-%d", os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Delete)
	for _, args := range [][]string{
		{"link", "add", "eth0", "type", "veth", "peer", "name", "switch0"},
		{"link", "set", "switch0", "up"},
		{"addr", "add", "10.98.0.2/24", "dev", "eth0"},
	} {
		if err := ns.IP(args...); err != nil {
			t.Fatal(err)
		}
	}
	n := &Node{Name: "cp-0", netns: ns}
	routed := func(dst string) bool {
		t.Helper()
		out, err := exec.Command("ip", "-n", ns.Name(), "route", "show", "exact", dst).Output()
		if err != nil {
			t.Fatal(err)
		}
		return strings.Contains(string(out), "via 10.98.0.1")
	}

	// Added while the link is down: recorded, not in the kernel, which takes no route over a down link.
	if err := n.route("10.99.1.0/24", "via", "10.98.0.1"); err != nil {
		t.Fatal(err)
	}
	if routed("10.99.1.0/24") {
		t.Fatal("a route over the down eth0 is in the kernel")
	}
	if err := n.SetLink(true); err != nil {
		t.Fatal(err)
	}
	if !routed("10.99.1.0/24") {
		t.Fatal("the route added while eth0 was down did not come with the link")
	}

	// Added while the link is up: in the kernel at once, gone with the link, back with it; replacing a route to the
	// same destination keeps one.
	if err := n.route("10.99.2.0/24", "via", "10.98.0.1"); err != nil {
		t.Fatal(err)
	}
	if err := n.route("10.99.2.0/24", "via", "10.98.0.1", "metric", "0"); err != nil {
		t.Fatal(err)
	}
	if !routed("10.99.2.0/24") {
		t.Fatal("a route added while eth0 is up is not in the kernel")
	}
	if len(n.routes) != 2 {
		t.Fatalf("the node records %d routes, want 2: %v", len(n.routes), n.routes)
	}
	if err := n.SetLink(false); err != nil {
		t.Fatal(err)
	}
	if routed("10.99.1.0/24") || routed("10.99.2.0/24") {
		t.Fatal("routes over eth0 outlived its link")
	}
	if err := n.SetLink(true); err != nil {
		t.Fatal(err)
	}
	if !routed("10.99.1.0/24") || !routed("10.99.2.0/24") {
		t.Fatal("the routes did not come back with the link")
	}
}
