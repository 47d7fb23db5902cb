// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package frr_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/frr"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/podrun"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/reaper"
)

func TestMain(m *testing.M) {
	reaper.ConfineOrWarn()
	os.Exit(m.Run())
}

// routerConf is a top-of-rack router's configuration as operators write it for speakers that only dial (Cilium's
// agents): a listen range into a peer group, eBGP routes accepted without a policy, ECMP over the speakers.
const routerConf = `hostname tor
log stdout informational
router bgp 64512
 bgp router-id 10.9.0.1
 no bgp ebgp-requires-policy
 bgp bestpath as-path multipath-relax
 neighbor SPEAKERS peer-group
 neighbor SPEAKERS remote-as external
 bgp listen range 10.9.0.0/24 peer-group SPEAKERS
 address-family ipv4 unicast
  maximum-paths 8
 exit-address-family
`

// speakerConf is a speaker that dials the router and originates prefix, as each of Cilium's agents would.
func speakerConf(asn int, id, prefix string) string {
	return fmt.Sprintf(`hostname speaker-%s
log stdout informational
router bgp %d
 bgp router-id %s
 no bgp ebgp-requires-policy
 no bgp network import-check
 neighbor 10.9.0.1 remote-as 64512
 neighbor 10.9.0.1 timers connect 1
 address-family ipv4 unicast
  network %s
 exit-address-family
`, id, asn, id, prefix)
}

// TestRouterInstallsECMPRouteFromSpeakers: two speakers that dial a router through its listen range advertise the
// same prefix; the router's kernel gets one route with a next hop per speaker. Every daemon runs in the namespaces the
// test made, none in the machine's, and nothing of them is left after Stop.
func TestRouterInstallsECMPRouteFromSpeakers(t *testing.T) {
	if why := frr.Available(); why != "" {
		t.Skip(why)
	}
	started := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cgroups, err := reaper.Cgroup("frr-test")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(cgroups, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(cgroups) })
	routers := startSegment(ctx, t, cgroups)
	router := routers[0]
	var hops []string
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		hops, err = router.NextHops("198.18.0.0/24")
		slices.Sort(hops)
		return slices.Equal(hops, []string{"10.9.0.2", "10.9.0.3"}), err
	}); err != nil {
		neighbors, _ := router.Neighbors(ctx)
		t.Fatalf("the router's route to 198.18.0.0/24 goes via %v, want both speakers: %v; neighbours %+v\n%s", hops, err, neighbors, router.Log())
	}
	neighbors, err := router.Neighbors(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(neighbors) != 2 || slices.ContainsFunc(neighbors, func(n frr.Neighbor) bool { return n.State != "Established" || n.PrefixesReceived != 1 }) {
		t.Errorf("neighbours %+v, want both speakers established with one prefix each", neighbors)
	}
	// Whole seconds: established after the test started, and not after now.
	for _, n := range neighbors {
		if n.Established.Before(started.Truncate(time.Second)) || n.Established.After(time.Now()) {
			t.Errorf("neighbour %s established at %s, want between %s and now", n.Address, n.Established, started)
		}
	}
	// Standing sessions are no drops, across several of bgpd's whole-second clock readings.
	watching, stopWatching := context.WithTimeout(ctx, 2500*time.Millisecond)
	watch := router.WatchSessions(watching, 100*time.Millisecond)
	watch.Wait()
	stopWatching()
	if drops := watch.Drops(started); len(drops) > 0 {
		t.Errorf("the watch saw standing sessions drop: %+v", drops)
	}
	if found, err := frr.InMachineNamespace(); err != nil || len(found) > 0 {
		t.Errorf("FRR processes in the machine's network namespace: %v (%v)", found, err)
	}

	for _, r := range routers {
		r.Stop()
	}
	// No daemon survives Stop, whichever cgroup it may have got into: none runs in the routers' namespaces.
	for _, name := range []string{"frrtest-tor", "frrtest-a", "frrtest-b"} {
		if found, err := frr.InNamespace("/run/netns/" + name); err != nil || len(found) > 0 {
			t.Errorf("FRR processes still run in %s after Stop: %v (%v)", name, found, err)
		}
	}
	for _, name := range []string{"tor", "a", "b"} {
		if _, err := os.Stat(cgroups + "/" + name); !os.IsNotExist(err) {
			t.Errorf("the cgroup of router %s is left: %v", name, err)
		}
	}
}

// startSegment starts the router "tor" on a bridge in a namespace of its own, and the speakers "a" and "b" in theirs,
// plugged into it, each router in a cgroup below cgroups; the router comes first. The test's cleanup stops them all
// and deletes the namespaces.
func startSegment(ctx context.Context, t *testing.T, cgroups string) []*frr.Router {
	t.Helper()
	var routers []*frr.Router
	t.Cleanup(func() {
		for _, r := range routers {
			r.Stop()
		}
	})
	start := func(name string, ns *podrun.Netns, conf string) {
		r, err := frr.Start(ctx, ns, cgroups+"/"+name, conf)
		if err != nil {
			t.Fatal(err)
		}
		routers = append(routers, r)
	}
	tor := netns(t, "frrtest-tor")
	for _, args := range [][]string{{"link", "add", "br0", "type", "bridge"}, {"addr", "add", "10.9.0.1/24", "dev", "br0"}, {"link", "set", "br0", "up"}} {
		if err := tor.IP(args...); err != nil {
			t.Fatal(err)
		}
	}
	start("tor", tor, routerConf)
	for _, speaker := range []struct{ name, ip string }{{"a", "10.9.0.2"}, {"b", "10.9.0.3"}} {
		ns := netns(t, "frrtest-"+speaker.name)
		for _, args := range [][]string{
			{"link", "add", "v-" + speaker.name, "type", "veth", "peer", "name", "eth0", "netns", ns.Name()},
			{"link", "set", "v-" + speaker.name, "master", "br0", "up"},
		} {
			if err := tor.IP(args...); err != nil {
				t.Fatal(err)
			}
		}
		for _, args := range [][]string{{"addr", "add", speaker.ip + "/24", "dev", "eth0"}, {"link", "set", "eth0", "up"}} {
			if err := ns.IP(args...); err != nil {
				t.Fatal(err)
			}
		}
		start(speaker.name, ns, speakerConf(64600+len(routers), speaker.ip, "198.18.0.0/24"))
	}
	return routers
}

// netns creates a network namespace that the test's cleanup deletes.
func netns(t *testing.T, name string) *podrun.Netns {
	t.Helper()
	ns, err := podrun.NewNetns(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Delete)
	return ns
}
