// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package connect

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/apiserverendpoints"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/cilium"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/ciliumchart"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/ciliumoperator"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/fixtures"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/podrun"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/testenv"
)

// version is the Cilium release of the binaries (hack/cilium) and of the charts they run from.
const version = "1.19.7"

// operatorContainer and configContainer are the operator's container and the agent's init container that runs
// `cilium-dbg build-config`, in both charts.
const (
	operatorContainer = "cilium-operator"
	configContainer   = "config"
)

// installation is one chart as the webhook admitted it: the operator Deployment and the chart's ConfigMaps
// (`cilium-config` as admitted), by name.
type installation struct {
	agent      *appsv1.DaemonSet
	operator   *appsv1.Deployment
	configMaps map[string]map[string]string
}

// charts are the charts whose operator the tests run: Gardener's networking-cilium, which real shoots deploy, and
// upstream's for the operator binary's version.
var charts = map[string]func() (*ciliumchart.Objects, error){
	"networking-cilium": func() (*ciliumchart.Objects, error) {
		return ciliumchart.RenderGardener(ciliumchart.GardenerVersion, ciliumchart.GardenerValues(ciliumchart.GardenerVersion))
	},
	"cilium-" + version: func() (*ciliumchart.Objects, error) {
		return ciliumchart.Render(version, ciliumchart.Values(version))
	},
}

var (
	installMu sync.Mutex
	// installed holds every chart's installation, or the error that stopped the installations, after the first install.
	installed  map[string]*installation
	installErr error
)

// forEachChart runs test once for each chart's installation.
func forEachChart(t *testing.T, test func(t *testing.T, inst *installation)) {
	for _, name := range slices.Sorted(maps.Keys(charts)) {
		t.Run(name, func(t *testing.T) { test(t, install(t, name)) })
	}
}

// install sends the chart's agent DaemonSet, operator Deployment and ConfigMaps through kube-apiserver as a dry run, so
// that the webhook admits them without the two charts' objects replacing each other; creates the ServiceAccounts with
// cluster-admin (what is tested is how they connect, not their RBAC); and waits until the endpoints ConfigMap lists
// the control-plane nodes.
//
// All charts are installed at the first call, before any test stores a `cilium-config` of its own; when one cannot
// be, every test that needs a chart fails with that error.
func install(t *testing.T, chart string) *installation {
	t.Helper()
	installMu.Lock()
	defer installMu.Unlock()
	if installed == nil && installErr == nil {
		all := map[string]*installation{}
		for _, name := range slices.Sorted(maps.Keys(charts)) {
			inst, err := installChart(name)
			if err != nil {
				installErr = fmt.Errorf("installing %s: %w", name, err)
				break
			}
			all[name] = inst
		}
		if installErr == nil {
			installed = all
		}
	}
	if installErr != nil {
		t.Fatal(installErr)
	}
	return installed[chart]
}

func installChart(chart string) (*installation, error) {
	ctx := context.Background()
	rendered, err := charts[chart]()
	if err != nil {
		return nil, err
	}
	if rendered.Version != version {
		return nil, fmt.Errorf("%s deploys Cilium %s, the operator binary is %s", chart, rendered.Version, version)
	}
	inst := &installation{agent: rendered.Agent.DeepCopy(), operator: rendered.Operator.DeepCopy(), configMaps: map[string]map[string]string{}}
	// The webhook patches only once the extension has its endpoints: until then a dry run comes back as rendered.
	if err := testenv.WaitFor(ctx, time.Minute, func(ctx context.Context) (bool, error) {
		inst.operator = rendered.Operator.DeepCopy()
		if err := envtest.Client.Create(ctx, inst.operator, client.DryRunAll); err != nil {
			return false, err
		}
		return slices.ContainsFunc(inst.operator.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == apiserverendpoints.VolumeName }), nil
	}); err != nil {
		return nil, err
	}
	if err := envtest.Client.Create(ctx, inst.agent, client.DryRunAll); err != nil {
		return nil, err
	}
	for _, obj := range rendered.All {
		switch obj := obj.(type) {
		case *corev1.ConfigMap:
			admitted := obj.DeepCopy()
			if err := envtest.Client.Create(ctx, admitted, client.DryRunAll); err != nil {
				return nil, err
			}
			inst.configMaps[obj.Name] = admitted.Data
		case *corev1.ServiceAccount:
			if err := envtest.Client.Create(ctx, obj.DeepCopy()); err != nil && !apierrors.IsAlreadyExists(err) {
				return nil, err
			}
		}
	}
	for _, sa := range []string{inst.operator.Spec.Template.Spec.ServiceAccountName, inst.agent.Spec.Template.Spec.ServiceAccountName} {
		binding := &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: sa + "-connect"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: cilium.Namespace, Name: sa}},
		}
		if err := envtest.Client.Create(ctx, binding); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, err
		}
	}
	want := make([]string, 0, len(fixtures.ControlPlaneIPs))
	for _, ip := range fixtures.ControlPlaneIPs {
		want = append(want, apiserverendpoints.URL(ip))
	}
	if err := testenv.WaitFor(ctx, 30*time.Second, func(ctx context.Context) (bool, error) {
		cm := &corev1.ConfigMap{}
		if err := envtest.Client.Get(ctx, client.ObjectKey{Namespace: cilium.Namespace, Name: apiserverendpoints.ConfigMapName}, cm); err != nil {
			return false, err
		}
		inst.configMaps[apiserverendpoints.ConfigMapName] = cm.Data
		return cm.Data[apiserverendpoints.KeyAPIServerURLs] == strings.Join(want, ","), nil
	}); err != nil {
		return nil, err
	}
	return inst, nil
}

// admitted creates pod through kube-apiserver, so that the webhook admits it, and returns it as stored.
func admitted(t *testing.T, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	if err := envtest.Client.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = envtest.Client.Delete(context.Background(), pod) })
	return pod
}

// run starts container of pod as kubelet would on node, in the sandbox, with the pod's ServiceAccount token and the
// cluster CA, and stops it when the test ends.
func run(t *testing.T, inst *installation, pod *corev1.Pod, container, node string, env map[string]string) *podrun.Started {
	t.Helper()
	ctx := context.Background()
	ciliumoperator.FreeLease(ctx, envtest.Client)
	sandbox.Reset()
	storeConfig(t, inst.configMaps[cilium.ConfigMapName])

	// cilium-config as the operator's config directory gets the serve addresses and what the operator would otherwise
	// wait for or create, as ciliumoperator.Config sets them.
	configMaps := maps.Clone(inst.configMaps)
	configMaps[cilium.ConfigMapName] = maps.Clone(configMaps[cilium.ConfigMapName])
	maps.Copy(configMaps[cilium.ConfigMapName], ciliumoperator.Config(9234, 9963))

	c, err := podrun.ForPod(ctx, envtest, pod, container)
	if err != nil {
		t.Fatal(err)
	}
	c.Node, c.ConfigMaps, c.Env = node, configMaps, env
	c.Dir, c.LogPath = t.TempDir(), filepath.Join(envtest.Dir, "connect", strings.ReplaceAll(t.Name(), "/", "_")+".log")
	started, err := sandbox.Start(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		started.Stop(context.Background())
		if t.Failed() {
			t.Logf("--- %s log ---\n%s", container, started.LogTail(40))
		}
	})
	return started
}

// storeConfig makes the cluster's `cilium-config` the chart's, for the components that read it through kube-apiserver.
func storeConfig(t *testing.T, data map[string]string) {
	t.Helper()
	ctx := context.Background()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: cilium.Namespace, Name: cilium.ConfigMapName}}
	if _, err := controllerutil.CreateOrUpdate(ctx, envtest.Client, cm, func() error {
		cm.Data = data
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// waitUntilLeading waits until the operator has taken its leader lease, which it does only over a working, verified
// connection with its own token.
func waitUntilLeading(t *testing.T, p *podrun.Started) {
	t.Helper()
	if err := ciliumoperator.WaitUntilLeading(context.Background(), envtest.Client, p.Process); err != nil {
		t.Fatalf("the operator did not connect and lead: %v", err)
	}
}

// assertReached checks that the operator reached only addresses among allowed, at least one of them, and never the
// ClusterIP or the VIP.
func assertReached(t *testing.T, allowed ...string) {
	t.Helper()
	got := sandbox.Reached()
	if len(got) == 0 {
		t.Error("no connection to any kube-apiserver address")
	}
	for addr := range got {
		if !slices.Contains(allowed, addr) {
			t.Errorf("connected to %s (%d times), allowed only %v", addr, got[addr], allowed)
		}
	}
	t.Logf("connections: %v", got)
}

// stayAfterSync keeps the operator running for a while after it leads, so that a later switch (to the ClusterIP, as
// a >= 1.18 agent with several URLs does once synced) would show.
func stayAfterSync(t *testing.T, p *podrun.Started) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case <-p.Stopped():
			t.Fatalf("cilium-operator stopped: %v", p.Err())
		case <-deadline:
			return
		case <-time.After(time.Second):
		}
	}
}

// placement is where and how a Cilium pod runs.
type placement struct {
	name string
	// node runs the pod; for the operator, a control-plane node is known at admission, another node is not (the
	// ReplicaSet controller creates the pod unscheduled).
	node string
	// admitted: the webhook admitted the pod; otherwise it comes from the admitted template alone, as while the webhook
	// is unreachable.
	admitted bool
	// firstDies kills the control-plane address the pod's hosts file lists first for the server name, and returns how
	// to bring it back.
	firstDies func(addr string) (func() error, error)
	// allowed are the addresses the pod may reach; a pod with hostAliases must reach the first that is alive.
	allowed []string
}

// refuse switches addr's kube-apiserver off, its node staying up: connections are refused.
func refuse(addr string) (func() error, error) {
	sandbox.SwitchOff(addr)
	return func() error { return sandbox.SwitchOn(addr) }, nil
}

func placements() []placement {
	return []placement{
		{name: "on cp-1", node: "cp-1", admitted: true, allowed: []string{podrun.LocalAPIServer}},
		{name: "on worker-0", node: "worker-0", admitted: true, allowed: sandbox.ControlPlaneAddresses()},
		{name: "on worker-0 with the first control-plane node dead", node: "worker-0", admitted: true, firstDies: refuse, allowed: sandbox.ControlPlaneAddresses()},
		{name: "on worker-0 with the first control-plane node black-holed", node: "worker-0", admitted: true, firstDies: sandbox.BlackHole, allowed: sandbox.ControlPlaneAddresses()},
		{name: "from the template on worker-1", node: "worker-1", allowed: sandbox.ControlPlaneAddresses()},
	}
}

// forEachPlacement runs test for every chart and placement with the pod that pod makes from the chart's installation.
func forEachPlacement(t *testing.T, pod func(inst *installation, node string, controlPlane bool) *corev1.Pod, test func(t *testing.T, inst *installation, pod *corev1.Pod, p placement)) {
	forEachChart(t, func(t *testing.T, inst *installation) {
		for _, p := range placements() {
			t.Run(p.name, func(t *testing.T) {
				pl := pod(inst, p.node, slices.Contains(p.allowed, podrun.LocalAPIServer))
				if p.admitted {
					pl = admitted(t, pl)
				} else {
					pl.Name = pl.GenerateName + "unadmitted"
				}
				if len(pl.Spec.HostAliases) > 0 {
					// Go's resolver returns a name's hosts-file addresses in file order (IPv4 keeps it under RFC 6724
					// sorting: net/addrselect.go applies rule 9 to IPv6 only) and the dialer tries them in turn, so the
					// webhook's rotation of hostAliases decides which kube-apiserver a pod uses while all are alive.
					first := pl.Spec.HostAliases[0].IP + ":443"
					p.allowed = []string{first}
					if p.firstDies != nil {
						revive, err := p.firstDies(first)
						if err != nil {
							t.Fatal(err)
						}
						t.Cleanup(func() {
							if err := revive(); err != nil {
								t.Error(err)
							}
						})
						p.allowed = []string{pl.Spec.HostAliases[1].IP + ":443"}
					}
				}
				test(t, inst, pl, p)
			})
		}
	})
}

// TestOperator: the operator connects, verifies Gardener's certificate and leads: on a control-plane node through its
// own kube-apiserver, elsewhere through the control-plane nodes' kube-apiservers under the server name, failing over
// from a dead one, and from the template alone through the endpoints ConfigMap's kubeconfig and URLs. It stays there
// after it has synced.
func TestOperator(t *testing.T) {
	forEachPlacement(t, func(inst *installation, node string, controlPlane bool) *corev1.Pod {
		pod := ciliumchart.DeploymentPod(inst.operator)
		if controlPlane {
			pod.Spec.NodeName = node
		}
		return pod
	}, func(t *testing.T, inst *installation, pod *corev1.Pod, p placement) {
		process := run(t, inst, pod, operatorContainer, p.node, nil)
		waitUntilLeading(t, process)
		stayAfterSync(t, process)
		assertReached(t, p.allowed...)
	})
}

// TestAgentConfig: the agent's `config` init container, `cilium-dbg build-config`, reads `cilium-config` through
// kube-apiserver and writes the agent's configuration, over the same paths as the operator.
func TestAgentConfig(t *testing.T) {
	forEachPlacement(t, func(inst *installation, node string, _ bool) *corev1.Pod {
		return ciliumchart.DaemonSetPod(inst.agent, node)
	}, func(t *testing.T, inst *installation, pod *corev1.Pod, p placement) {
		process := run(t, inst, pod, configContainer, p.node, nil)
		select {
		case <-process.Stopped():
		case <-time.After(time.Minute):
			t.Fatal("build-config did not finish within a minute")
		}
		if process.Err() != nil {
			t.Fatalf("build-config failed: %v", process.Err())
		}
		dest, ok := process.HostPath(buildConfigDest(t, pod))
		if !ok {
			t.Fatal("build-config's destination is in no volume")
		}
		for key, want := range inst.configMaps[cilium.ConfigMapName] {
			if got, err := os.ReadFile(filepath.Join(dest, key)); err != nil || string(got) != want {
				t.Errorf("%s: %q (%v), want %q from cilium-config", key, got, err, want)
			}
		}
		assertReached(t, p.allowed...)
	})
}

// buildConfigDest is where the config container writes: its --dest, or build-config's default.
func buildConfigDest(t *testing.T, pod *corev1.Pod) string {
	t.Helper()
	for _, c := range pod.Spec.InitContainers {
		if c.Name != configContainer {
			continue
		}
		for _, arg := range slices.Concat(c.Command, c.Args) {
			if dest, ok := strings.CutPrefix(arg, "--dest="); ok {
				return dest
			}
		}
		return "/tmp/cilium/config-map"
	}
	t.Fatal("no config container")
	return ""
}

// TestBareInternalIPsFailVerification: what the webhook gave pods off the control plane before, the control-plane
// InternalIPs as host and URLs, fails TLS verification against Gardener's certificate, which holds no node IP.
func TestBareInternalIPsFailVerification(t *testing.T) {
	inst := install(t, "networking-cilium")
	pod := ciliumchart.DeploymentPod(inst.operator)
	pod.Name = "cilium-operator-bare-ips"
	var urls []string
	for _, ip := range fixtures.ControlPlaneIPs {
		urls = append(urls, apiserverendpoints.URL(ip))
	}
	run(t, inst, pod, operatorContainer, "worker-1", map[string]string{
		cilium.EnvServiceHost: fixtures.ControlPlaneIPs[0], cilium.EnvAPIServerURLs: strings.Join(urls, ","), cilium.EnvKubeconfigPath: "",
	})
	// Cilium logs only that it rotates: every handshake fails and it dials the next URL at once.
	if err := testenv.WaitFor(context.Background(), time.Minute, func(context.Context) (bool, error) {
		n := 0
		for _, addr := range sandbox.ControlPlaneAddresses() {
			n += sandbox.Reached()[addr]
		}
		return n >= 20, fmt.Errorf("%d connections", n)
	}); err != nil {
		t.Errorf("the operator did not keep rotating over the control-plane addresses: %v", err)
	}
	if leading, err := ciliumoperator.Leading(context.Background(), envtest.Client); !apierrors.IsNotFound(err) {
		t.Errorf("the operator with bare IPs got a lease: leading %v, %v", leading, err)
	}
	// Why: Go verifies an IP host against the certificate's IP SANs, as Cilium's client does for a bare-IP URL.
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(envtest.Certificates.CA.CertificatePEM)
	conn, err := tls.Dial("tcp", sandbox.APIServer, &tls.Config{RootCAs: roots, ServerName: fixtures.ControlPlaneIPs[0]})
	if err == nil {
		conn.Close()
		t.Fatal("the certificate verified for a control-plane InternalIP")
	}
	if !strings.Contains(err.Error(), "x509: certificate is valid for") {
		t.Errorf("handshake error %v, want an x509 name mismatch", err)
	}
	t.Logf("as expected: %v", err)
}
