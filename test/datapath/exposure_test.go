package datapath

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gardencorev1beta1 "github.com/gardener/gardener/pkg/apis/core/v1beta1"
	extensionsv1alpha1 "github.com/gardener/gardener/pkg/apis/extensions/v1alpha1"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/cilium"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/exposure/resources"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/ciliumbin"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/ciliumchart"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/ciliumoperator"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/fixtures"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/podrun"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/testenv"
)

// operatorNode runs the operator: its pod is admitted unscheduled, like every pod of a Deployment.
const operatorNode = "worker-0"

var (
	exposeOnce sync.Once
	exposed    *extensionsv1alpha1.SelfHostedShootExposure
	exposeErr  error
)

// expose starts the agents and the chart's operator, creates the shoot's exposure as gardenadm does and waits until
// the extension reports the VIP.
func expose(t *testing.T) *extensionsv1alpha1.SelfHostedShootExposure {
	t.Helper()
	ctx := context.Background()
	waitForAgents(t)
	exposeOnce.Do(func() {
		if exposeErr = startOperator(ctx); exposeErr != nil {
			return
		}
		exp := fixtures.Exposure("datapath", fixtures.Nodes())
		if exposeErr = envtest.Client.Create(ctx, exp); exposeErr != nil {
			return
		}
		exposeErr = envtest.WaitForLastOperation(ctx, exp, 3*time.Minute, func(op *gardencorev1beta1.LastOperation) bool {
			return op.State == gardencorev1beta1.LastOperationStateSucceeded
		})
		exposed = exp
	})
	if exposeErr != nil {
		t.Fatalf("exposing kube-apiserver: %v", exposeErr)
	}
	return exposed
}

// waitForAgents starts the agents (once) and waits until every one is ready.
func waitForAgents(t *testing.T) map[string]*corev1.Pod {
	t.Helper()
	ctx := context.Background()
	pods, err := startAgents(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range slices.Sorted(maps.Keys(nodes)) {
		n := nodes[name]
		if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 5*time.Minute, true, n.ready); err != nil {
			t.Fatalf("the agent on %s did not become ready: %v\n%s", name, err, n.logTail())
		}
	}
	return pods
}

// startOperator runs the operator container of the chart's admitted operator pod on operatorNode.
func startOperator(ctx context.Context) error {
	rendered, err := ciliumchart.RenderGardener(ciliumchart.GardenerVersion, ciliumchart.GardenerValues(ciliumchart.GardenerVersion))
	if err != nil {
		return err
	}
	pod := ciliumchart.DeploymentPod(rendered.Operator)
	if err := envtest.Client.Create(ctx, pod); err != nil {
		return err
	}
	configMaps, err := kubeSystemConfigMaps(ctx)
	if err != nil {
		return err
	}
	// As in the connection suite: the operator's serve addresses, and Cilium's CRDs left as the test installed them.
	configMaps[cilium.ConfigMapName] = maps.Clone(configMaps[cilium.ConfigMapName])
	maps.Copy(configMaps[cilium.ConfigMapName], ciliumoperator.Config(9234, 9963))
	binary, err := ciliumbin.Path(ciliumbin.Operator)
	if err != nil {
		return err
	}
	token, err := podrun.Token(ctx, envtest.Config, pod)
	if err != nil {
		return err
	}
	n := nodes[operatorNode]
	dir := filepath.Join(envtest.Dir, "nodes", n.name, "operator")
	operator, err := n.sandbox.Start(podrun.Container{
		Pod: pod, Name: "cilium-operator", Node: n.name, Binary: binary, ConfigMaps: configMaps,
		Token: token, CA: testenv.GardenerCertificates.CA.CertificatePEM,
		Dir: dir, LogPath: filepath.Join(dir, "cilium-operator.log"),
	})
	if err != nil {
		return err
	}
	n.mu.Lock()
	n.operator = operator
	n.mu.Unlock()
	return nil
}

// TestVIP: the exposure puts kube-apiserver on the VIP with Cilium alone. From the client, exactly one control-plane
// node, the holder of Cilium's L2 announcement lease, answers ARP for the VIP, and HTTPS to the VIP under the shoot's
// API name reaches a kube-apiserver whose certificate verifies.
func TestVIP(t *testing.T) {
	exp := expose(t)
	if len(exp.Status.Ingress) != 1 || exp.Status.Ingress[0].IP != fixtures.ExposureVIP {
		t.Fatalf("status.ingress %+v, want %s", exp.Status.Ingress, fixtures.ExposureVIP)
	}
	ctx := context.Background()
	var holder string
	if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		h, err := leaseHolder(ctx, exp)
		holder = h
		return h != "", client.IgnoreNotFound(err)
	}); err != nil {
		t.Fatalf("no node holds the L2 announcement lease of the VIP: %v", err)
	}
	var macs []string
	if err := wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(context.Context) (bool, error) {
		var err error
		macs, err = arp(fixtures.ExposureVIP)
		return len(macs) > 0, err
	}); err != nil {
		t.Fatalf("nobody answers ARP for %s: %v", fixtures.ExposureVIP, err)
	}
	want, err := mac(nodes[holder].sandbox)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(macs, []string{want}) {
		t.Errorf("ARP for %s answered by %v, want only %s of the lease holder %s", fixtures.ExposureVIP, macs, want, holder)
	}
	body, err := readyzThroughVIP(ctx)
	if err != nil {
		t.Fatalf("HTTPS through the VIP: %v", err)
	}
	t.Logf("VIP %s announced by %s (%s); /readyz through it: %s", fixtures.ExposureVIP, holder, want, body)
}

// leaseHolder is the node that holds Cilium's L2 announcement lease of the exposure's Service
// (pkg/l2announcer: cilium-l2announce-<namespace>-<name> in Cilium's namespace).
func leaseHolder(ctx context.Context, exp *extensionsv1alpha1.SelfHostedShootExposure) (string, error) {
	lease := &coordinationv1.Lease{}
	key := client.ObjectKey{Namespace: cilium.Namespace, Name: "cilium-l2announce-" + exp.Namespace + "-" + resources.ServiceName(exp.Name)}
	if err := envtest.Client.Get(ctx, key, lease); err != nil {
		return "", err
	}
	if lease.Spec.HolderIdentity == nil {
		return "", nil
	}
	return *lease.Spec.HolderIdentity, nil
}

var macPattern = regexp.MustCompile(`\[([0-9A-Fa-f]{2}(:[0-9A-Fa-f]{2}){5})\]`)

// arp asks for ip from the client, as a host on the segment does, and returns the MAC addresses that answered.
func arp(ip string) ([]string, error) {
	out, err := exec.Command("ip", "netns", "exec", clientHost.Name(), "arping", "-c", "3", "-w", "4", "-I", "eth0", ip).CombinedOutput()
	if err != nil && len(out) == 0 {
		return nil, fmt.Errorf("arping: %w", err)
	}
	var macs []string
	for _, m := range macPattern.FindAllStringSubmatch(string(out), -1) {
		if mac := strings.ToLower(m[1]); !slices.Contains(macs, mac) {
			macs = append(macs, mac)
		}
	}
	slices.Sort(macs)
	return macs, nil
}

// mac is the MAC address of a node's eth0.
func mac(s *podrun.Sandbox) (string, error) {
	out, err := exec.Command("ip", "-n", s.Name, "-o", "link", "show", "eth0").Output()
	if err != nil {
		return "", err
	}
	f := strings.Fields(string(out))
	for i, w := range f {
		if w == "link/ether" && i+1 < len(f) {
			return strings.ToLower(f[i+1]), nil
		}
	}
	return "", fmt.Errorf("no MAC in %q", out)
}

// readyzThroughVIP sends GET /readyz from the client to the VIP, verifying the certificate under the shoot's external
// API name, as a kubelet or a user does, with the test's admin credentials.
func readyzThroughVIP(ctx context.Context) (string, error) {
	tlsConfig, err := rest.TLSConfigFor(envtest.Config)
	if err != nil {
		return "", err
	}
	tlsConfig.ServerName = ciliumchart.ExternalHost
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsConfig, DialContext: clientHost.DialContext}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+fixtures.ExposureVIP+":443/readyz", nil)
	if err != nil {
		return "", err
	}
	resp, err := c.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s: %s", resp.Status, body)
	}
	return string(body), nil
}
