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
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/ciliumchart"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/ciliumoperator"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/fixtures"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/podrun"
)

// stoppedOnce are the nodes whose agent or kube-apiserver a test has stopped and started again.
var stoppedOnce = map[string]bool{}

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
		if exposeErr = envtest.WaitForLastOperation(ctx, exp, 3*time.Minute, func(op *gardencorev1beta1.LastOperation) bool {
			return op.State == gardencorev1beta1.LastOperationStateSucceeded
		}); exposeErr != nil {
			return
		}
		// An agent announces the VIP once it holds the lease.
		if exposeErr = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			h, err := leaseHolder(ctx, exp)
			return h != "", client.IgnoreNotFound(err)
		}); exposeErr != nil {
			exposeErr = fmt.Errorf("no node took the L2 announcement lease of the VIP: %w", exposeErr)
			return
		}
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
	c, err := podrun.ForPod(ctx, envtest.Config, pod, "cilium-operator")
	if err != nil {
		return err
	}
	n := nodes[operatorNode]
	dir := filepath.Join(envtest.Dir, "nodes", n.name, "operator")
	c.Node, c.ConfigMaps, c.Dir, c.LogPath = n.name, configMaps, dir, filepath.Join(dir, "cilium-operator.log")
	operator, err := n.sandbox.Start(c)
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
	holder, err := leaseHolder(ctx, exp)
	if err != nil {
		t.Fatal(err)
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

// announcementLease is Cilium's L2 announcement lease of the exposure's Service (pkg/l2announcer:
// cilium-l2announce-<namespace>-<name> in Cilium's namespace).
func announcementLease(ctx context.Context, exp *extensionsv1alpha1.SelfHostedShootExposure) (*coordinationv1.Lease, error) {
	lease := &coordinationv1.Lease{}
	key := client.ObjectKey{Namespace: cilium.Namespace, Name: "cilium-l2announce-" + exp.Namespace + "-" + resources.ServiceName(exp.Name)}
	return lease, envtest.Client.Get(ctx, key, lease)
}

// leaseDuration is the duration in the exposure's L2 announcement lease.
func leaseDuration(ctx context.Context, exp *extensionsv1alpha1.SelfHostedShootExposure) time.Duration {
	lease, err := announcementLease(ctx, exp)
	if err != nil || lease.Spec.LeaseDurationSeconds == nil {
		return 0
	}
	return time.Duration(*lease.Spec.LeaseDurationSeconds) * time.Second
}

// leaseHolder is the node that holds the exposure's L2 announcement lease.
func leaseHolder(ctx context.Context, exp *extensionsv1alpha1.SelfHostedShootExposure) (string, error) {
	lease, err := announcementLease(ctx, exp)
	if err != nil || lease.Spec.HolderIdentity == nil {
		return "", err
	}
	return *lease.Spec.HolderIdentity, nil
}

var macPattern = regexp.MustCompile(`\[([0-9A-Fa-f]{2}(:[0-9A-Fa-f]{2}){5})\]`)

// arp asks for ip from the client three times, as a host on the segment does, and returns the MAC addresses that
// answered.
func arp(ip string) ([]string, error) {
	return arping(ip, "-c", "3", "-w", "4")
}

// arpOnce asks for ip once, waiting at most a second.
func arpOnce(ip string) ([]string, error) {
	return arping(ip, "-c", "1", "-w", "1")
}

func arping(ip string, args ...string) ([]string, error) {
	out, err := exec.Command("ip", append([]string{"netns", "exec", clientHost.Name(), "arping", "-I", "eth0"}, append(args, ip)...)...).CombinedOutput()
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

// TestVIPFailover: the lease holder's node dies (its link and its agent); another control-plane node takes the lease
// and answers ARP for the VIP, and HTTPS through the VIP works again. The times are logged (make bench reports them);
// the node is started again afterwards.
func TestVIPFailover(t *testing.T) {
	exp := expose(t)
	ctx := context.Background()
	holder, err := leaseHolder(ctx, exp)
	if err != nil || holder == "" {
		t.Fatalf("no lease holder: %q, %v", holder, err)
	}
	dead := nodes[holder]
	deadMAC, err := mac(dead.sandbox)
	if err != nil {
		t.Fatal(err)
	}
	var macs []string
	if err := wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(context.Context) (bool, error) {
		macs, err = arp(fixtures.ExposureVIP)
		return slices.Equal(macs, []string{deadMAC}), err
	}); err != nil {
		t.Fatalf("before the failover, ARP for the VIP is answered by %v, want only the holder %s's %s: %v", macs, holder, deadMAC, err)
	}

	stoppedOnce[holder] = true
	// restartNode stops whatever still runs on the node first, however far this test got.
	t.Cleanup(func() { restartNode(t, dead) })
	// The node dies: its link goes down and its agent ends without a chance to hand over the lease.
	if err := dead.sandbox.IP("link", "set", "eth0", "down"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	dead.kill()
	// ARP and HTTPS are polled apart, each about every 200 ms with a short timeout, so that one's wait does not delay
	// the other's measurement.
	var arpAfter, httpsAfter time.Duration
	var polls sync.WaitGroup
	polls.Go(func() {
		_ = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
			if macs, _ = arpOnce(fixtures.ExposureVIP); len(macs) > 0 && !slices.Contains(macs, deadMAC) {
				arpAfter = time.Since(start)
				return true, nil
			}
			return false, nil
		})
	})
	polls.Go(func() {
		_ = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			ctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			if _, err := readyzThroughVIP(ctx); err == nil {
				httpsAfter = time.Since(start)
				return true, nil
			}
			return false, nil
		})
	})
	polls.Wait()
	if arpAfter == 0 || httpsAfter == 0 {
		t.Fatalf("after %s stopped, ARP answered by %v (%s after), HTTPS %s after", holder, macs, arpAfter, httpsAfter)
	}
	// The new holder's MAC, asked again: arpOnce waits for the first answer only.
	if macs, err = arp(fixtures.ExposureVIP); err != nil {
		t.Fatal(err)
	}
	newHolder, err := leaseHolder(ctx, exp)
	if err != nil {
		t.Fatal(err)
	}
	if newHolder == holder || !nodes[newHolder].controlPlane {
		t.Errorf("the lease went from %s to %s", holder, newHolder)
	}
	if want, err := mac(nodes[newHolder].sandbox); err != nil || !slices.Equal(macs, []string{want}) {
		t.Errorf("ARP answered by %v, want only the new holder %s's %s (%v)", macs, newHolder, want, err)
	}
	t.Logf("%s died: %s answers ARP for the VIP after %s, HTTPS through the VIP works after %s (lease duration %s)",
		holder, newHolder, arpAfter.Round(100*time.Millisecond), httpsAfter.Round(100*time.Millisecond), leaseDuration(ctx, exp))
}

// restartNode stops the node's agent if it still runs, brings its link up and starts its agent again from the same
// admitted pod.
func restartNode(t *testing.T, n *node) {
	t.Helper()
	ctx := context.Background()
	n.stop()
	if err := n.sandbox.IP("link", "set", "eth0", "up"); err != nil {
		t.Error(err)
		return
	}
	configMaps, err := kubeSystemConfigMaps(ctx)
	if err != nil {
		t.Error(err)
		return
	}
	if err := n.startAgent(ctx, agentPods[n.name], configMaps); err != nil {
		t.Error(err)
		return
	}
	if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 5*time.Minute, true, n.ready); err != nil {
		t.Errorf("the agent on %s did not become ready again: %v\n%s", n.name, err, n.logTail())
	}
}

// TestVIPWithOneAPIServerDown: one control-plane node's kube-apiserver stops while the node stays up. The VIP keeps
// serving, but Cilium keeps sending a share of the new connections to the stopped kube-apiserver as long as the
// exposure's EndpointSlice lists it as ready (the need for active health checking). The share is logged.
func TestVIPWithOneAPIServerDown(t *testing.T) {
	exp := expose(t)
	ctx := context.Background()
	holder, err := leaseHolder(ctx, exp)
	if err != nil {
		t.Fatal(err)
	}
	var down *node
	for _, name := range slices.Sorted(maps.Keys(nodes)) {
		if n := nodes[name]; n.controlPlane && name != holder {
			down = n
			break
		}
	}
	stoppedOnce[down.name] = true
	addrs := []string{down.ip + ":443", podrun.LocalAPIServer}
	for _, a := range addrs {
		down.sandbox.SwitchOff(a)
	}
	t.Cleanup(func() {
		for _, a := range addrs {
			if err := down.sandbox.SwitchOn(a); err != nil {
				t.Error(err)
			}
		}
	})
	const attempts = 30
	made, failed := 0, 0
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		attempt, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		if _, err := readyzThroughVIP(attempt); err != nil {
			failed++
		}
		made++
		return made == attempts, nil
	}); err != nil {
		t.Fatal(err)
	}
	if failed == attempts {
		t.Fatalf("no request through the VIP succeeded with %s's kube-apiserver down", down.name)
	}
	t.Logf("with %s's kube-apiserver down and its node up, %d of %d new connections through the VIP failed (3 backends)", down.name, failed, attempts)
}
