// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

// Package testenv starts the envtest control plane (kube-apiserver and etcd built from source by
// hack/envtest/build.sh) with Gardener's CRDs from the gardener module, and runs the extension against it with the
// flags it takes in production.
package testenv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	gardencorev1beta1 "github.com/gardener/gardener/pkg/apis/core/v1beta1"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/scheme"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/reaper"
)

// Env is a running control plane.
type Env struct {
	Environment *envtest.Environment
	Config      *rest.Config
	Client      client.Client
	// Kubeconfig is the path of a cluster-admin kubeconfig for processes and flags.
	Kubeconfig string
	// Certificates are those of Options: nil while kube-apiserver serves envtest's own.
	Certificates *Certificates
	// Dir is a scratch directory removed by Stop.
	Dir string
	// APIServerLog and EtcdLog are where kube-apiserver and etcd write their logs (in Dir): kube-apiserver traces
	// requests slower than 500 ms, etcd logs compactions and slow requests, which explain slow figures.
	APIServerLog, EtcdLog string
	logs                  []*os.File

	// MetricsAddress and HealthAddress are where the extension serves metrics and health probes: free loopback ports.
	MetricsAddress, HealthAddress string

	// Extension is the extension process that RunSuite started.
	Extension *Process
	// extensionCommand is its binary and flags, for Extensions().Restart; extensionLogs the logs of earlier processes.
	extensionCommand []string
	extensionLogs    strings.Builder
	// shoot is the self-hosted shoot of CreateSelfHostedShoot, for the chart's values.
	shoot *gardencorev1beta1.Shoot
}

// Extensions are the extension's processes on the control plane, as the suites run them: the one RunSuite starts with
// its production flags (Run), its restarts and a second replica.
type Extensions struct{ *Env }

// Extensions are the control plane's extension processes.
func (e *Env) Extensions() Extensions { return Extensions{e} }

// Exposures are the shoot's SelfHostedShootExposures as gardenlet drives them: a reconciliation requested, waited for
// and its outcome read.
type Exposures struct{ *Env }

// Exposures are the control plane's exposures as gardenlet drives them.
func (e *Env) Exposures() Exposures { return Exposures{e} }

// GardenerCRDs are the CRDs of Gardener's seed API that the extension reads or writes.
var GardenerCRDs = []string{
	"10-crd-extensions.gardener.cloud_clusters.yaml",
	"10-crd-extensions.gardener.cloud_selfhostedshootexposures.yaml",
	"10-crd-resources.gardener.cloud_managedresources.yaml",
}

// CiliumCRDDirs are the directories of Cilium's CRDs in the cilium module, so that every object the extension writes
// meets Cilium's real schemas.
var CiliumCRDDirs = []string{
	"pkg/k8s/apis/cilium.io/client/crds/v2",
	"pkg/k8s/apis/cilium.io/client/crds/v2alpha1",
}

// Options say how Start sets up the control plane.
type Options struct {
	// WithoutCiliumCRDs leaves Cilium's CRDs out: a suite that starts the extension before Cilium is installed, as
	// gardenadm does, calls InstallCiliumCRDs later.
	WithoutCiliumCRDs bool
	// Certificates, when set, replace envtest's serving certificate of kube-apiserver with one generated as Gardener
	// generates it for a self-hosted shoot (NewGardenerCertificates).
	Certificates *Certificates
	// Prerequisites are what the suite needs from the machine besides the control plane: RunSuite checks them, and the
	// envtest assets, before it starts anything.
	Prerequisites []Prerequisite
	// NodeRestriction authorizes kubelets as a cluster does (the Node authorizer before RBAC) and admits their Node
	// writes through the NodeRestriction plugin, which Gardener's kube-apiserver enables and envtest does not.
	NodeRestriction bool
}

func ciliumCRDPaths() ([]string, error) {
	ciliumDir, err := ModuleDir("github.com/cilium/cilium")
	if err != nil {
		return nil, err
	}
	var paths []string
	for _, d := range CiliumCRDDirs {
		paths = append(paths, filepath.Join(ciliumDir, d))
	}
	return paths, nil
}

// InstallCiliumCRDs installs Cilium's CRDs and waits until kube-apiserver serves them, as cilium-operator does when
// it starts.
func (e *Env) InstallCiliumCRDs() error {
	paths, err := ciliumCRDPaths()
	if err != nil {
		return err
	}
	_, err = envtest.InstallCRDs(e.Config, envtest.CRDInstallOptions{Paths: paths, ErrorIfPathMissing: true})
	return err
}

// ModuleDir is the directory of module in the module cache: a module of the build list by its path, or any version
// as path@version; it is downloaded through the module proxy when it is missing.
func ModuleDir(module string) (string, error) {
	out, err := exec.Command("go", "mod", "download", "-json", module).Output()
	if err != nil {
		return "", fmt.Errorf("go mod download %s: %w", module, err)
	}
	var mod struct{ Dir, Error string }
	if err := json.Unmarshal(out, &mod); err != nil {
		return "", err
	}
	if mod.Dir == "" {
		return "", fmt.Errorf("go mod download %s: %s", module, mod.Error)
	}
	return mod.Dir, nil
}

// AdvertiseAddress is the address kube-apiserver publishes in the `kubernetes` Service's EndpointSlice.
const AdvertiseAddress = "198.51.100.200"

// Start starts kube-apiserver and etcd from KUBEBUILDER_ASSETS with Gardener's CRDs and, unless opts leave them out,
// Cilium's installed.
func Start(opts Options) (*Env, error) {
	if err := EnvtestAssets(); err != nil {
		return nil, err
	}
	// Before the first process starts: everything the suite starts from here on dies with it.
	reaper.ConfineOrWarn()
	crds, err := crdPaths(opts)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "cilium-selfhosted-envtest-")
	if err != nil {
		return nil, err
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory:    os.Getenv("KUBEBUILDER_ASSETS"),
		CRDInstallOptions:        envtest.CRDInstallOptions{Paths: crds, ErrorIfPathMissing: true},
		ControlPlaneStartTimeout: 2 * time.Minute,
		ControlPlaneStopTimeout:  time.Minute,
		Scheme:                   scheme.New(),
	}
	e := &Env{Environment: env, Certificates: opts.Certificates, Dir: dir, APIServerLog: filepath.Join(dir, "kube-apiserver.log"), EtcdLog: filepath.Join(dir, "etcd.log")}
	if err := e.configureControlPlane(opts); err != nil {
		e.Stop()
		return nil, err
	}
	if e.Config, err = env.Start(); err != nil {
		e.Stop()
		return nil, fmt.Errorf("starting envtest: %w", err)
	}
	if err := e.connect(); err != nil {
		e.Stop()
		return nil, err
	}
	return e, nil
}

// crdPaths are the files of Gardener's CRDs and, unless opts leave them out, Cilium's.
func crdPaths(opts Options) ([]string, error) {
	gardener, err := ModuleDir("github.com/gardener/gardener")
	if err != nil {
		return nil, err
	}
	var crds []string
	for _, f := range GardenerCRDs {
		crds = append(crds, filepath.Join(gardener, "example", "seed-crds", f))
	}
	if opts.WithoutCiliumCRDs {
		return crds, nil
	}
	cilium, err := ciliumCRDPaths()
	return append(crds, cilium...), err
}

// configureControlPlane sets kube-apiserver's flags, certificates and grace period, and where both processes log.
func (e *Env) configureControlPlane(opts Options) error {
	apiServer := e.Environment.ControlPlane.GetAPIServer()
	// Dual-stack Service CIDRs, so that a dual-stack shoot's exposure Service is accepted (RequireDualStack).
	apiServer.Configure().Set("service-cluster-ip-range", "10.96.0.0/16,fd00:10:96::/108")
	// The `kubernetes` Service's endpoint, where Cilium's kube-proxy replacement sends the ClusterIP: by default
	// kube-apiserver advertises the machine's own address; a documentation address (TEST-NET-2) that no route leads to
	// keeps whatever dials the ClusterIP off the machine's network. Loopback is not allowed in an endpoint.
	apiServer.Configure().Set("advertise-address", AdvertiseAddress)
	if opts.NodeRestriction {
		apiServer.Configure().Set("authorization-mode", "Node,RBAC")
		apiServer.Configure().Set("enable-admission-plugins", "NodeRestriction")
	}
	// kubelet's grace period for kube-apiserver, as Gardener's pod sets it (terminationGracePeriodSeconds: 30 in
	// pkg/component/kubernetes/apiserver/deployment.go): clients that hold watches over HTTP/2 keep a stopping
	// kube-apiserver in its graceful shutdown for up to its request timeout (60 s), and kubelet kills it before that.
	apiServer.StopTimeout = apiServerGracePeriod
	// Certificates in a directory of ours: envtest generates new ones into a directory of its own on every start,
	// which would make RestartAPIServer a different server that no client trusts.
	apiServer.CertDir = filepath.Join(e.Dir, "kube-apiserver")
	if err := os.MkdirAll(apiServer.CertDir, 0o700); err != nil {
		return err
	}
	if opts.Certificates != nil {
		if err := opts.Certificates.install(apiServer); err != nil {
			return err
		}
	}
	if err := e.configureAudit(apiServer); err != nil {
		return err
	}
	apiServerLog, err := e.createLog(e.APIServerLog)
	if err != nil {
		return err
	}
	apiServer.Out, apiServer.Err = apiServerLog, apiServerLog
	etcdLog, err := e.createLog(e.EtcdLog)
	if err != nil {
		return err
	}
	e.Environment.ControlPlane.Etcd = &envtest.Etcd{Out: etcdLog, Err: etcdLog}
	return nil
}

// connect picks the extension's metrics and health addresses and makes the test's client and the cluster-admin
// kubeconfig for processes.
func (e *Env) connect() error {
	for _, addr := range []*string{&e.MetricsAddress, &e.HealthAddress} {
		port, err := FreePort()
		if err != nil {
			return err
		}
		*addr = "127.0.0.1:" + strconv.Itoa(port)
	}
	// The test's client speaks for several components at once (every node's kubelet in test/framework/ciliumnodes, the
	// observers of a failover), each of which has client-go's budget of its own in a real cluster; with one shared
	// budget of 5 requests a second, their waits pile up past the observers' deadlines.
	e.Config.QPS, e.Config.Burst = 100, 200
	var err error
	if e.Client, err = client.New(e.Config, client.Options{Scheme: scheme.New()}); err != nil {
		return err
	}
	admin, err := e.Environment.AddUser(envtest.User{Name: "envtest-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return err
	}
	kubeconfig, err := admin.KubeConfig()
	if err != nil {
		return err
	}
	e.Kubeconfig = filepath.Join(e.Dir, "kubeconfig")
	return os.WriteFile(e.Kubeconfig, kubeconfig, 0o600)
}

// Stop stops the control plane and removes the scratch directory.
func (e *Env) Stop() {
	_ = e.Environment.Stop()
	for _, f := range e.logs {
		_ = f.Close()
	}
	_ = os.RemoveAll(e.Dir)
}

func (e *Env) createLog(path string) (*os.File, error) {
	f, err := os.Create(path)
	if err == nil {
		e.logs = append(e.logs, f)
	}
	return f, err
}

// AuditDirEnv names a directory into which every kube-apiserver of the harness writes an audit log of each request's
// metadata (who, with which user agent, what), as <its directory's name>.audit.log: where its CPU goes
// (docs/development/testing.md, "What keeps the lanes busy between cases"). Unset, nothing is audited.
const AuditDirEnv = "TESTENV_AUDIT_DIR"

// auditPolicy records every request once, when its response is complete.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived", "ResponseStarted"]
rules:
- level: Metadata
`

// configureAudit has apiServer write its audit log into AuditDirEnv's directory, when it is set.
func (e *Env) configureAudit(apiServer *envtest.APIServer) error {
	dir := os.Getenv(AuditDirEnv)
	if dir == "" {
		return nil
	}
	policy := filepath.Join(e.Dir, "audit-policy.yaml")
	if err := os.WriteFile(policy, []byte(auditPolicy), 0o600); err != nil {
		return err
	}
	apiServer.Configure().Set("audit-policy-file", policy)
	apiServer.Configure().Set("audit-log-path", filepath.Join(dir, filepath.Base(e.Dir)+".audit.log"))
	apiServer.Configure().Set("audit-log-maxbackup", "0")
	return nil
}

// apiServerGracePeriod is how long a stopping kube-apiserver is given before it is killed.
const apiServerGracePeriod = 30 * time.Second

// advertiseGracePeriod is the grace period of Advertise's restart, a step of the harness and not a case's restart:
// kube-apiserver takes its address out of the `kubernetes` Service as its shutdown begins (a pre-shutdown hook of
// pkg/controlplane/controller/kubernetesservice), so a short grace does what the whole one would, 25 s sooner.
const advertiseGracePeriod = 5 * time.Second

// RestartAPIServer stops kube-apiserver as kubelet stops its static pod (SIGTERM, SIGKILL after the grace period) and
// starts it again with the same address, certificates and etcd once it has been unreachable for downtime (counted
// from SIGTERM, when it closes its listener). It returns once kube-apiserver is healthy again.
func (e *Env) RestartAPIServer(downtime time.Duration) error {
	return e.restartAPIServer(apiServerGracePeriod, downtime)
}

// KillAPIServer kills kube-apiserver as a crash or the OOM killer does (SIGKILL: no graceful shutdown, so its address
// stays in the `kubernetes` Service) and starts it again with the same address, certificates and etcd once it has been
// unreachable for downtime. It returns once kube-apiserver is healthy again.
func (e *Env) KillAPIServer(downtime time.Duration) error {
	return e.restartAPIServer(0, downtime)
}

// Advertise restarts kube-apiserver (gracefully, so that it takes its old address out of the `kubernetes` Service)
// advertising ip, and waits until the `kubernetes` EndpointSlice names only ip.
func (e *Env) Advertise(ctx context.Context, ip string) error {
	e.Environment.ControlPlane.GetAPIServer().Configure().Set("advertise-address", ip)
	if err := e.restartAPIServer(advertiseGracePeriod, 0); err != nil {
		return err
	}
	return e.WaitForAdvertised(ctx, ip)
}

// WaitForAdvertised waits up to a minute until the `kubernetes` EndpointSlice names only ip (at kube-apiserver's
// secure port, the one it serves): kube-apiserver adds its address once it is ready
// (pkg/controlplane/controller/kubernetesservice).
func (e *Env) WaitForAdvertised(ctx context.Context, ip string) error {
	var slice discoveryv1.EndpointSlice
	return WaitFor(ctx, time.Minute, func(ctx context.Context) (bool, error) {
		if err := e.Client.Get(ctx, client.ObjectKey{Namespace: metav1.NamespaceDefault, Name: "kubernetes"}, &slice); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		return len(slice.Endpoints) == 1 && slices.Equal(slice.Endpoints[0].Addresses, []string{ip}), nil
	})
}

// restartAPIServer stops kube-apiserver as kubelet stops a container, SIGTERM and SIGKILL once grace has passed (at
// once, without SIGTERM, for a grace of zero), and starts it again once it has been unreachable for downtime, counted
// from the first signal. It returns once kube-apiserver is healthy again.
func (e *Env) restartAPIServer(grace, downtime time.Duration) error {
	apiServer := e.Environment.ControlPlane.GetAPIServer()
	pid, err := processWithArg(filepath.Base(apiServer.Path), "--cert-dir="+apiServer.CertDir)
	if err != nil {
		return err
	}
	// Gone once envtest has reaped it.
	gone := func(context.Context) (bool, error) { return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH), nil }
	stopped := time.Now()
	if grace > 0 {
		if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
			return fmt.Errorf("stopping kube-apiserver (%d): %w", pid, err)
		}
		_ = WaitFor(context.Background(), grace, gone)
	}
	if exited, _ := gone(context.Background()); !exited {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("killing kube-apiserver (%d): %w", pid, err)
		}
	}
	// envtest's bookkeeping: its Stop finds the process gone, or signals one not reaped yet.
	if err := apiServer.Stop(); err != nil && !errors.Is(err, syscall.ESRCH) && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("after stopping kube-apiserver: %w", err)
	}
	// The outage itself, not a wait for a condition.
	time.Sleep(downtime - time.Since(stopped))
	if err := apiServer.Start(); err != nil {
		return fmt.Errorf("starting kube-apiserver again: %w\n--- kube-apiserver log (tail) ---\n%s", err, fileTail(e.APIServerLog, 30))
	}
	return nil
}

// processWithArg is the one process of the binary named name that was started with arg.
func processWithArg(name, arg string) (int, error) {
	cmdlines, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	var found []int
	for _, path := range cmdlines {
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if filepath.Base(args[0]) == name && slices.Contains(args[1:], arg) {
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(path)))
			found = append(found, pid)
		}
	}
	if len(found) != 1 {
		return 0, fmt.Errorf("%d processes of %s run with %s, want one: %v", len(found), name, arg, found)
	}
	return found[0], nil
}

// FreePort returns a loopback TCP port that is free right now, below the kernel's range of ephemeral ports: a port
// from that range (what listening on port 0 gives) can be taken as the source port of any outgoing connection between
// now and the moment the process it is meant for binds it, which then fails with "address already in use".
func FreePort() (int, error) {
	low := ephemeralPortsFrom()
	for range 100 {
		port := 10000 + rand.IntN(low-10000)
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			continue
		}
		_ = l.Close()
		return port, nil
	}
	return 0, fmt.Errorf("no free port between 10000 and %d", low)
}

// ephemeralPortsFrom is the first port of the kernel's ephemeral range (Linux's default 32768).
func ephemeralPortsFrom() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	fields := strings.Fields(string(b))
	if len(fields) == 0 {
		return 32768
	}
	if low, err := strconv.Atoi(fields[0]); err == nil && low > 10100 {
		return low
	}
	return 32768
}

// Flags are the flags of the extension in production on a self-hosted shoot (the chart's DaemonSet) with this
// machine's free ports: the webhook server on loopback, where kube-apiserver calls it by URL, certificates from
// Gardener's certificate management in namespace, the webhooks merged into the extension's own
// MutatingWebhookConfiguration, leader election in namespace.
func (e Extensions) Flags(kubeconfig, namespace string, webhookPort int) []string {
	return []string{
		"--kubeconfig=" + kubeconfig,
		"--self-hosted-shoot-cluster=true",
		"--webhook-config-mode=url",
		"--webhook-config-url=" + webhookURL(webhookPort),
		"--webhook-config-namespace=" + namespace,
		"--webhook-config-server-host=127.0.0.1",
		"--webhook-config-server-port=" + strconv.Itoa(webhookPort),
		"--webhook-config-cert-dir=" + filepath.Join(e.Dir, "webhook-certs"),
		"--leader-election=true",
		"--leader-election-namespace=" + namespace,
		"--metrics-bind-address=" + e.MetricsAddress,
		"--health-bind-address=" + e.HealthAddress,
		"--log-format=text",
		// The fixture nodes' InternalIPs are not on this machine, and no probe may leave it; test/operator/extensionpod
		// runs the extension as its chart's pod, with probing on, where those addresses exist.
		"--endpoint-probe-interval=0",
	}
}

// webhookURL is where kube-apiserver reaches the extension's webhook server, on loopback as the chart's webhookAddress.
func webhookURL(port int) string { return "127.0.0.1:" + strconv.Itoa(port) }

// WaitFor polls cond every 100ms until it returns true or timeout passes. An error from cond does not end the wait
// (kube-apiserver may be restarting); the last one is reported with the timeout.
func WaitFor(ctx context.Context, timeout time.Duration, cond func(context.Context) (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		ok, err := cond(ctx)
		if ok {
			return nil
		}
		if err != nil {
			last = err
		}
		select {
		case <-ctx.Done():
			if last != nil {
				return fmt.Errorf("timed out after %s: %w", timeout, last)
			}
			return fmt.Errorf("timed out after %s", timeout)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
