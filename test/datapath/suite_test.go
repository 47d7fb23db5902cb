// Package datapath runs Cilium's real agents, built from the cilium module, on nodes that are network namespaces on a
// bridge, exactly as the pods the webhook admitted would run them, and observes where they connect.
//
// Each node has its own network, mount and cgroup namespaces (../shared/notes/datapath.md has why each is needed so
// that an agent changes nothing outside its node): eth0 on the bridge with the node's InternalIP, a fresh bpffs, a
// cgroup2 subtree of its own for socket load-balancing, /proc/sys/kernel read-only, and what kubelet gives the pod
// (test/podrun). "kube-apiserver on each control-plane node" is a proxy at the node's InternalIP:443 and at
// localhost:443 inside it, in front of the test's kube-apiserver, whose certificate is made as Gardener makes it.
// Whatever reaches the `kubernetes` Service's backend address inside a node (where Cilium's kube-proxy replacement
// would send a connection to the ClusterIP) is counted.
package datapath

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"

	"github.com/gardener/gardener-extension-cilium-selfhosted/test/ciliumbin"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/fixtures"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/podrun"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/testenv"
)

// clang is the compiler the agent finds on its PATH: Cilium needs LLVM >= 18.1 (Debian bookworm's default is 14).
const clang = "/usr/lib/llvm-19/bin/clang"

var (
	envtest *testenv.Env
	network *lan
	// nodes are the nodes that run an agent, by name.
	nodes = map[string]*node{}
	// cgroups is the cgroup2 directory under which every node has its own.
	cgroups string
	// clientHost is a host on the nodes' segment that is no node: a user, a kubelet of another cluster, a load test.
	clientHost *podrun.Netns
)

// clientIP is the client's address on the nodes' segment.
const clientIP = "10.0.3.100"

func TestMain(m *testing.M) {
	if _, err := os.Stat(clang); err != nil {
		fmt.Fprintf(os.Stderr, "the datapath suite needs %s for the agent's BPF programs (apt-get install clang-19 llvm-19): %v\n", clang, err)
		os.Exit(1)
	}
	if err := podrun.ServeAsShoot("shoot--local--datapath"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	agent, err := ciliumbin.Path(ciliumbin.Agent)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	before, err := snapshotHost()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := testenv.RunSuite(m, fixtures.WithExposureConfig(fixtures.Shoot(true), fixtures.ExposureConfigL2), setup)
	problems, err := before.leftovers(prefix, agent)
	if err != nil {
		problems = append(problems, err.Error())
	}
	for _, p := range problems {
		fmt.Fprintln(os.Stderr, "FAIL: left behind on the machine:", p)
		code = 1
	}
	os.Exit(code)
}

// prefix names what the suite creates on the machine: namespaces and its cgroup.
var prefix = "cdp" + strconv.Itoa(os.Getpid())

// agentNodes are the fixture nodes that get a namespace and an agent.
var agentNodes = []string{"cp-0", "cp-1", "cp-2", "worker-0"}

func setup(ctx context.Context, e *testenv.Env) (func(), error) {
	envtest = e
	root, err := cgroup2Root()
	if err != nil {
		return nil, err
	}
	cgroups = filepath.Join(root, "cilium-datapath-"+prefix)
	if err := os.Mkdir(cgroups, 0o755); err != nil {
		return nil, err
	}
	if network, err = newLAN(prefix); err != nil {
		return nil, err
	}
	teardown := func() {
		var stopping sync.WaitGroup
		for _, n := range nodes {
			stopping.Go(n.stop)
		}
		stopping.Wait()
		network.close()
		if err := removeCgroups(cgroups); err != nil {
			fmt.Fprintf(os.Stderr, "removing %s: %v\n", cgroups, err)
		}
	}
	if clientHost, err = network.attach("client", clientIP); err != nil {
		teardown()
		return nil, err
	}
	// The VIP is on the segment, as an L2-announced address must be: the client ARPs for it.
	if err := clientHost.IP("route", "add", fixtures.ExposureVIP+"/32", "dev", "eth0"); err != nil {
		teardown()
		return nil, err
	}
	for i, name := range agentNodes {
		n, err := newNode(ctx, name, i)
		if err != nil {
			teardown()
			return nil, fmt.Errorf("node %s: %w", name, err)
		}
		nodes[name] = n
	}
	return teardown, nil
}
