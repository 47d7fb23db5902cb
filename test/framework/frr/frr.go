// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

// Package frr runs a BGP router for the suites: FRR's zebra and bgpd from Debian's frr package (hack/setup.sh installs
// it and keeps its service from ever starting), as an operator's top-of-rack router runs them.
//
// Both daemons run in a network namespace the caller made and in a private mount namespace with a /run of its own
// (tmpfs) and the router's own directory over /etc/frr: FRR's `-N` only prefixes its paths and sets up no namespace, so
// the default paths (/etc/frr/<daemon>.conf, /run/frr/*.pid, /run/frr/zserv.api, the vty sockets) are made private
// instead. `-P 0` opens no vty port; vtysh reaches the daemons through their unix sockets inside that mount namespace.
// The daemons run in a cgroup of their own: Stop kills it, so that nothing of the router outlives it.
package frr

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/podrun"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/testenv"
)

// Daemons are the FRR programs a router runs, and Vtysh its shell.
const (
	Zebra = "/usr/lib/frr/zebra"
	Bgpd  = "/usr/lib/frr/bgpd"
	Vtysh = "/usr/bin/vtysh"
)

// Available says why the router cannot run here, "" when it can.
func Available() string {
	for _, p := range []string{Zebra, Bgpd, Vtysh} {
		if _, err := os.Stat(p); err != nil {
			return fmt.Sprintf("FRR is not installed (%s: %v): hack/setup.sh installs Debian's frr", p, err)
		}
	}
	if os.Geteuid() != 0 {
		return "FRR's daemons need root"
	}
	return ""
}

// Router is a running zebra and bgpd.
type Router struct {
	ns     *podrun.Netns
	dir    string
	cgroup string
	// process is the shell that starts zebra and becomes bgpd; its log is both daemons'.
	process *testenv.Process
}

// Start runs zebra and bgpd in ns with bgpd's configuration bgpdConf (FRR's configuration language) and waits until
// bgpd answers vtysh. The daemons run in cgroup, which Start creates and Stop removes; dir holds the configuration.
func Start(ctx context.Context, ns *podrun.Netns, cgroup, bgpdConf string) (*Router, error) {
	dir, err := os.MkdirTemp("", "frr-"+ns.Name()+"-")
	if err != nil {
		return nil, err
	}
	r := &Router{ns: ns, dir: dir, cgroup: cgroup}
	// The daemons drop to the package's user frr, which must read the configuration.
	if err := os.Chmod(dir, 0o755); err != nil {
		r.removeFiles()
		return nil, err
	}
	for name, content := range map[string]string{
		"zebra.conf": "hostname " + ns.Name() + "\nlog stdout informational\n",
		"bgpd.conf":  bgpdConf,
		// vtysh talks to each daemon's own socket; with the integrated configuration it would look for frr.conf.
		"vtysh.conf": "no service integrated-vtysh-config\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			r.removeFiles()
			return nil, err
		}
	}
	if err := os.Mkdir(cgroup, 0o755); err != nil {
		r.removeFiles()
		return nil, err
	}
	// In the private mount namespace: a /run of its own with /run/frr for the frr user, the router's directory over
	// /etc/frr; zebra first, bgpd once zebra's socket is there.
	script := `set -e
mount -t tmpfs -o mode=0755 frr-run /run
mkdir /run/frr
chown frr:frr /run/frr
mount --bind "$1" /etc/frr
` + Zebra + ` -P 0 -f /etc/frr/zebra.conf &
i=0; until [ -S /run/frr/zserv.api ]; do i=$((i+1)); [ $i -lt 200 ] || { echo "zebra did not start" >&2; exit 1; }; sleep 0.05; done
exec ` + Bgpd + ` -P 0 -f /etc/frr/bgpd.conf`
	cmd := exec.Command("/bin/sh", "-c", `echo $$ > "$0/cgroup.procs" && exec "$@"`, cgroup,
		"ip", "netns", "exec", ns.Name(), "unshare", "--mount", "--propagation", "private", "/bin/sh", "-c", script, "frr", dir)
	// The log outside dir, which the daemons see as /etc/frr.
	if r.process, err = testenv.StartCommand(dir+".log", cmd); err != nil {
		r.removeFiles()
		_ = os.Remove(cgroup)
		return nil, err
	}
	var last error
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		select {
		case <-r.process.Stopped():
			return false, fmt.Errorf("the router in %s ended: %v\n%s", ns.Name(), r.process.Err(), r.process.Log())
		default:
		}
		_, last = r.Vtysh(ctx, "show bgp summary json")
		return last == nil, nil
	}); err != nil {
		r.Stop()
		return nil, fmt.Errorf("bgpd in %s does not answer vtysh: %w (%v)\n%s", ns.Name(), err, last, r.Log())
	}
	return r, nil
}

// Vtysh runs one vtysh command against the router's daemons and returns its output.
func (r *Router) Vtysh(ctx context.Context, command string) ([]byte, error) {
	pid := r.process.Pid()
	out, err := exec.CommandContext(ctx, "nsenter", "-t", strconv.Itoa(pid), "-m", "-n", Vtysh, "-c", command).CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("vtysh -c %q: %w: %s", command, err, out)
	}
	return out, nil
}

// Neighbor is one BGP neighbour as bgpd shows it.
type Neighbor struct {
	// Address is the neighbour's address, State its session state ("Established", "Active", ...).
	Address, State string
	// PrefixesReceived is how many prefixes it sent that bgpd accepted.
	PrefixesReceived int
	// Established is when the session was last established (zero while it is not). bgpd computes it from two clocks
	// each read in whole seconds, so it can move by a second while the session stands; a session that
	// dropped and came back has a later one by more (GoBGP idles 5 s after a reset before it dials again).
	Established time.Time
}

// Neighbors are bgpd's IPv4 unicast neighbours (`show bgp ipv4 unicast summary json`).
func (r *Router) Neighbors(ctx context.Context) ([]Neighbor, error) {
	out, err := r.Vtysh(ctx, "show bgp ipv4 unicast summary json")
	if err != nil {
		return nil, err
	}
	var summary struct {
		Peers map[string]struct {
			State                 string `json:"state"`
			PfxRcd                int    `json:"pfxRcd"`
			AcceptedPrefixCounter int    `json:"acceptedPrefixCounter"`
			EstablishedEpoch      int64  `json:"peerUptimeEstablishedEpoch"`
		} `json:"peers"`
	}
	if err := json.Unmarshal(out, &summary); err != nil {
		return nil, fmt.Errorf("decoding bgpd's summary: %w: %s", err, out)
	}
	var neighbors []Neighbor
	for addr, p := range summary.Peers {
		n := Neighbor{Address: addr, State: p.State, PrefixesReceived: max(p.PfxRcd, p.AcceptedPrefixCounter)}
		if p.State == "Established" && p.EstablishedEpoch > 0 {
			n.Established = time.Unix(p.EstablishedEpoch, 0)
		}
		neighbors = append(neighbors, n)
	}
	return neighbors, nil
}

// HoldTimes are the negotiated hold times of the established sessions by neighbour address (`show bgp neighbors
// json`).
func (r *Router) HoldTimes(ctx context.Context) (map[string]time.Duration, error) {
	out, err := r.Vtysh(ctx, "show bgp neighbors json")
	if err != nil {
		return nil, err
	}
	var neighbors map[string]struct {
		State         string `json:"bgpState"`
		HoldTimeMsecs int    `json:"bgpTimerHoldTimeMsecs"`
	}
	if err := json.Unmarshal(out, &neighbors); err != nil {
		return nil, fmt.Errorf("decoding bgpd's neighbours: %w: %s", err, out)
	}
	holds := map[string]time.Duration{}
	for addr, n := range neighbors {
		if n.State == "Established" {
			holds[addr] = time.Duration(n.HoldTimeMsecs) * time.Millisecond
		}
	}
	return holds, nil
}

// NextHops are the gateways of the router's kernel route to prefix (one per path of a multipath route), none when
// the kernel has no such route: what zebra installed from bgpd's best paths.
func (r *Router) NextHops(prefix string) ([]string, error) {
	out, err := exec.Command("ip", "-n", r.ns.Name(), "-j", "route", "show", "exact", prefix).Output()
	if err != nil {
		return nil, fmt.Errorf("ip route show %s in %s: %w", prefix, r.ns.Name(), err)
	}
	var routes []struct {
		Gateway  string `json:"gateway"`
		Nexthops []struct {
			Gateway string `json:"gateway"`
		} `json:"nexthops"`
	}
	if err := json.Unmarshal(out, &routes); err != nil {
		return nil, fmt.Errorf("decoding the routes of %s: %w: %s", r.ns.Name(), err, out)
	}
	var hops []string
	for _, rt := range routes {
		if rt.Gateway != "" {
			hops = append(hops, rt.Gateway)
		}
		for _, nh := range rt.Nexthops {
			hops = append(hops, nh.Gateway)
		}
	}
	return hops, nil
}

// Log is what the daemons wrote.
func (r *Router) Log() string { return r.process.Log() }

// Stop kills the daemons (their whole cgroup) and removes the cgroup and the router's files.
func (r *Router) Stop() {
	_ = os.WriteFile(filepath.Join(r.cgroup, "cgroup.kill"), []byte("1"), 0o644)
	select {
	case <-r.process.Stopped():
	case <-time.After(10 * time.Second):
		fmt.Fprintf(os.Stderr, "frr: the router in %s did not end\n", r.ns.Name())
	}
	// The cgroup can be removed once its last process is gone.
	_ = wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		err := os.Remove(r.cgroup)
		return err == nil || errors.Is(err, os.ErrNotExist), nil
	})
	r.removeFiles()
}

func (r *Router) removeFiles() {
	_ = os.RemoveAll(r.dir)
	_ = os.Remove(r.dir + ".log")
}

// InMachineNamespace lists FRR processes (by pid and name) that run in the network namespace of this process, the
// machine's: a router must only ever run in a namespace a test made.
func InMachineNamespace() ([]string, error) { return InNamespace("/proc/self/ns/net") }

// InNamespace lists FRR processes (by pid and name) that run in the network namespace at path (/proc/<pid>/ns/net or
// a named one under /run/netns), compared by the namespace's identity rather than its name.
func InNamespace(path string) ([]string, error) {
	var want unix.Stat_t
	if err := unix.Stat(path, &want); err != nil {
		return nil, err
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var found []string
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		comm, err := os.ReadFile(filepath.Join("/proc", e.Name(), "comm"))
		if err != nil {
			continue
		}
		name := strings.TrimSpace(string(comm))
		if !isFRR(name) {
			continue
		}
		var ns unix.Stat_t
		if err := unix.Stat(filepath.Join("/proc", e.Name(), "ns", "net"), &ns); err == nil && ns.Dev == want.Dev && ns.Ino == want.Ino {
			found = append(found, e.Name()+" "+name)
		}
	}
	return found, nil
}

// isFRR says whether a process name is one of FRR's daemons or its watchdog.
func isFRR(name string) bool {
	switch name {
	case "zebra", "bgpd", "watchfrr", "staticd", "mgmtd", "bfdd", "ospfd", "ospf6d", "ripd", "ripngd", "isisd", "pimd", "ldpd", "nhrpd", "eigrpd", "babeld", "sharpd", "pbrd", "fabricd", "vrrpd", "pathd":
		return true
	}
	return false
}

// SessionDrop is an established session that went away (or was established anew between two looks): the adjacency
// change a router logs.
type SessionDrop struct {
	Address string
	At      time.Time
}

// establishedJitter is how far a standing session's Established moves.
const establishedJitter = time.Second

// SessionWatch records the router's session drops while it runs.
type SessionWatch struct {
	mu    sync.Mutex
	drops []SessionDrop
	done  chan struct{}
}

// WatchSessions looks at the router's sessions every interval until ctx ends.
func (r *Router) WatchSessions(ctx context.Context, interval time.Duration) *SessionWatch {
	w := &SessionWatch{done: make(chan struct{})}
	go func() {
		defer close(w.done)
		established := map[string]time.Time{}
		for {
			if neighbors, err := r.Neighbors(ctx); err == nil {
				now := map[string]time.Time{}
				for _, n := range neighbors {
					if !n.Established.IsZero() {
						now[n.Address] = n.Established
					}
				}
				w.mu.Lock()
				for addr, since := range established {
					if again, up := now[addr]; !up || again.Sub(since) > establishedJitter {
						w.drops = append(w.drops, SessionDrop{Address: addr, At: time.Now()})
					} else {
						now[addr] = since
					}
				}
				w.mu.Unlock()
				established = now
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(interval):
			}
		}
	}()
	return w
}

// Drops are the drops seen since t.
func (w *SessionWatch) Drops(since time.Time) []SessionDrop {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []SessionDrop
	for _, d := range w.drops {
		if !d.At.Before(since) {
			out = append(out, d)
		}
	}
	return out
}

// Wait waits until the watch has ended with its context.
func (w *SessionWatch) Wait() { <-w.done }
