// Package datapath runs Cilium's real agents on network-namespace nodes (test/framework/ciliumnodes), exactly as the pods the
// webhook admitted from Gardener's and upstream's charts would run them, and observes where they connect, that the
// exposure's VIP is announced and serves kube-apiserver, and how it fails over.
package datapath

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"

	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/ciliumbin"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/ciliumchart"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/ciliumnodes"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/fixtures"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/frr"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/podrun"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/testenv"
)

var (
	env     *testenv.Env
	cluster *ciliumnodes.Cluster
)

// newestLine is the newest Cilium release the webhook supports, whose agents and operator run from upstream's chart
// beside Gardener's 1.19.
var newestLine = ciliumchart.Versions[len(ciliumchart.Versions)-1]

// prefix names what the suite creates on the machine: namespaces and its cgroup.
var prefix = "cdp" + strconv.Itoa(os.Getpid())

func TestMain(m *testing.M) {
	if err := testenv.Check(ciliumnodes.Available, ciliumchart.GardenerChart, ciliumbin.Built(ciliumbin.Agent, ciliumbin.Dbg, ciliumbin.Operator),
		ciliumbin.BuiltFor(newestLine, ciliumbin.Agent, ciliumbin.Dbg, ciliumbin.Operator)); err != nil {
		os.Exit(testenv.CannotRun(err))
	}
	certs, err := podrun.ShootCertificates("shoot--local--datapath")
	if err != nil {
		os.Exit(testenv.CannotRun(err))
	}
	var agents []string
	for _, image := range []string{"cilium:v" + ciliumchart.GardenerVersion, "cilium:v" + newestLine} {
		agent, err := ciliumbin.PathFor(ciliumbin.Agent, image)
		if err != nil {
			os.Exit(testenv.CannotRun(err))
		}
		agents = append(agents, agent)
	}
	// The router's daemons too: they run in the suite's namespaces and cgroup only (test/framework/frr).
	agents = append(agents, frr.Zebra, frr.Bgpd)
	before, err := ciliumnodes.SnapshotHost()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := testenv.RunSuite(m, fixtures.WithExposureConfig(fixtures.Shoot(true), fixtures.ExposureConfigL2), testenv.Options{Certificates: certs}, setup)
	problems, err := before.Leftovers(prefix, agents...)
	if err != nil {
		problems = append(problems, err.Error())
	}
	for _, p := range problems {
		fmt.Fprintln(os.Stderr, "FAIL: left behind on the machine:", p)
		code = 1
	}
	os.Exit(code)
}

func setup(ctx context.Context, e *testenv.Env) (func(), error) {
	env = e
	// Every agent copies its BPF sources from the module cache, which the suite sees under /tmp from here on, as on a
	// CI runner with GOMODCACHE=/tmp/...: the agents' containers hide the machine's /tmp.
	restoreCache, err := testenv.ModuleCacheUnderTmp(prefix+"-gomodcache", ciliumchart.Module(ciliumchart.GardenerVersion), ciliumchart.Module(newestLine))
	if err != nil {
		return nil, err
	}
	if cluster, err = ciliumnodes.New(ctx, e, prefix, ciliumnodes.Options{ExtensionPods: true}); err != nil {
		restoreCache()
		return nil, err
	}
	return func() { cluster.Close(); restoreCache() }, nil
}

// showExtensionLogsOnFailure shows the end of every extension pod's log when t fails.
func showExtensionLogsOnFailure(t *testing.T) {
	t.Cleanup(func() {
		if t.Failed() {
			for _, n := range cluster.Nodes() {
				if n.ControlPlane {
					t.Logf("--- the extension pod on %s ---\n%s", n.Name, n.ExtensionLogTail(200))
				}
			}
		}
	})
}
