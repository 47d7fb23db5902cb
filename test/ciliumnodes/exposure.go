package ciliumnodes

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
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	extensionsv1alpha1 "github.com/gardener/gardener/pkg/apis/extensions/v1alpha1"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/cilium"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/exposure/ciliumconfig"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/exposure/resources"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/ciliumchart"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/ciliumoperator"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/fixtures"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/podrun"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/testenv"
)

// Expose runs the agents unless they run, starts the operator of Gardener's chart from its admitted pod, creates the shoot's
// exposure as gardenadm does, waits until the extension reports the VIP and an agent holds the announcement lease,
// once.
func (c *Cluster) Expose(ctx context.Context) (*extensionsv1alpha1.SelfHostedShootExposure, error) {
	c.mu.Lock()
	running := c.running
	c.mu.Unlock()
	if running == nil {
		if _, err := c.Run(ctx, Agents{}); err != nil {
			return nil, err
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.exposed != nil {
		return c.exposed, nil
	}
	if err := c.startOperator(ctx); err != nil {
		return nil, err
	}
	exp := fixtures.Exposure("datapath", fixtures.Nodes())
	if err := c.env.Client.Create(ctx, exp); err != nil {
		return nil, err
	}
	if err := testenv.WaitUntilReady(ctx, c.env.Client, exp, 3*time.Minute); err != nil {
		return nil, err
	}
	if _, err := c.WaitForLeaseHolder(ctx, exp, ""); err != nil {
		return nil, err
	}
	c.exposed = exp
	return exp, nil
}

// startOperator runs the operator container of Gardener's admitted operator pod on OperatorNode, with the stored
// ConfigMaps. The pod is admitted as a dry run: stored, kube-scheduler would bind it to whatever node it picks, where
// no kubelet would ever report it ready.
func (c *Cluster) startOperator(ctx context.Context) error {
	pod := ciliumchart.DeploymentPod(c.installed[GardenerChart].operator)
	if err := c.admit(ctx, pod); err != nil {
		return err
	}
	configMaps, err := c.kubeSystemConfigMaps(ctx)
	if err != nil {
		return err
	}
	// As in the connection suite: the operator's serve addresses, and Cilium's CRDs left as the test installed them.
	configMaps[cilium.ConfigMapName] = maps.Clone(configMaps[cilium.ConfigMapName])
	maps.Copy(configMaps[cilium.ConfigMapName], ciliumoperator.Config(9234, 9963))
	ct, err := podrun.ForPod(ctx, c.env, pod, "cilium-operator")
	if err != nil {
		return err
	}
	n := c.nodes[OperatorNode]
	dir := filepath.Join(c.env.Dir, "nodes", n.Name, "operator")
	ct.Node, ct.ConfigMaps, ct.Dir, ct.LogPath = n.Name, configMaps, dir, filepath.Join(dir, "cilium-operator.log")
	operator, err := n.sandbox.Start(ct)
	if err != nil {
		return err
	}
	n.mu.Lock()
	n.operator = operator
	n.mu.Unlock()
	return nil
}

// AnnouncementLease is Cilium's L2 announcement lease of the exposure's Service.
func (c *Cluster) AnnouncementLease(ctx context.Context, exp *extensionsv1alpha1.SelfHostedShootExposure) (*coordinationv1.Lease, error) {
	lease := &coordinationv1.Lease{}
	key := client.ObjectKey{Namespace: cilium.Namespace, Name: cilium.L2AnnouncementLeaseName(exp.Namespace, resources.ServiceName(exp.Name))}
	return lease, c.env.Client.Get(ctx, key, lease)
}

// LeaseHolder is the node that holds the exposure's L2 announcement lease, "" when none does.
func (c *Cluster) LeaseHolder(ctx context.Context, exp *extensionsv1alpha1.SelfHostedShootExposure) (string, error) {
	lease, err := c.AnnouncementLease(ctx, exp)
	if err != nil || lease.Spec.HolderIdentity == nil {
		return "", client.IgnoreNotFound(err)
	}
	return *lease.Spec.HolderIdentity, nil
}

// WaitForLeaseHolder waits until a node other than not holds the lease, and returns it.
func (c *Cluster) WaitForLeaseHolder(ctx context.Context, exp *extensionsv1alpha1.SelfHostedShootExposure, not string) (string, error) {
	var holder string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		var err error
		holder, err = c.LeaseHolder(ctx, exp)
		return holder != "" && holder != not, err
	})
	if err != nil {
		return "", fmt.Errorf("no node other than %q took the L2 announcement lease of the VIP: %w", not, err)
	}
	return holder, nil
}

// leaseDuration is the duration written in the exposure's L2 announcement lease by its holder.
func (c *Cluster) leaseDuration(ctx context.Context, exp *extensionsv1alpha1.SelfHostedShootExposure) time.Duration {
	lease, err := c.AnnouncementLease(ctx, exp)
	if err != nil || lease.Spec.LeaseDurationSeconds == nil {
		return 0
	}
	return time.Duration(*lease.Spec.LeaseDurationSeconds) * time.Second
}

// configuredLeaseDuration is the lease duration the control-plane agents run with: their timings, or cilium-config's
// as stored.
func (c *Cluster) configuredLeaseDuration() (time.Duration, error) {
	c.mu.Lock()
	running := c.running
	c.mu.Unlock()
	if running == nil {
		return 0, fmt.Errorf("no agents run")
	}
	if running.Lease != nil {
		return running.Lease.Duration, nil
	}
	configMaps, err := c.kubeSystemConfigMaps(context.Background())
	if err != nil {
		return 0, err
	}
	v := configMaps[cilium.ConfigMapName][ciliumconfig.KeyL2LeaseDuration]
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("cilium-config %s: %w", ciliumconfig.KeyL2LeaseDuration, err)
	}
	return d, nil
}

var macPattern = regexp.MustCompile(`\[([0-9A-Fa-f]{2}(:[0-9A-Fa-f]{2}){5})\]`)

// ARP asks for ip from the client three times, as a host on the segment does, and returns the MAC addresses that
// answered.
func (c *Cluster) ARP(ip string) ([]string, error) { return c.arping(ip, "-c", "3", "-w", "4") }

// arpOnce asks for ip once, waiting at most a second.
func (c *Cluster) arpOnce(ip string) ([]string, error) { return c.arping(ip, "-c", "1", "-w", "1") }

func (c *Cluster) arping(ip string, args ...string) ([]string, error) {
	out, err := exec.Command("ip", append([]string{"netns", "exec", c.Client.Name(), "arping", "-I", "eth0"}, append(args, ip)...)...).CombinedOutput()
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

// WaitForARP waits until the VIP is answered by ARP from the client, and returns who answered.
func (c *Cluster) WaitForARP(ctx context.Context, done func(macs []string) bool) ([]string, error) {
	var macs []string
	err := wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(context.Context) (bool, error) {
		var err error
		macs, err = c.ARP(fixtures.ExposureVIP)
		return done(macs), err
	})
	return macs, err
}

// ReadyzThroughVIP sends GET /readyz from the client to the VIP, verifying the certificate under the shoot's
// external API name, as a kubelet or a user does, with the test's admin credentials.
func (c *Cluster) ReadyzThroughVIP(ctx context.Context) (string, error) {
	tlsConfig, err := rest.TLSConfigFor(c.env.Config)
	if err != nil {
		return "", err
	}
	tlsConfig.ServerName = ciliumchart.ExternalHost
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsConfig, DialContext: c.Client.DialContext, DisableKeepAlives: true}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+fixtures.ExposureVIP+":443/readyz", nil)
	if err != nil {
		return "", err
	}
	resp, err := hc.Do(req)
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

// Failover is what one failover of the VIP took.
type Failover struct {
	// From is the node that died, To the node that holds the lease afterwards.
	From, To string
	// ARP is the time from the death until a live node answers ARP for the VIP, HTTPS until GET /readyz through
	// the VIP succeeds again.
	ARP, HTTPS time.Duration
	// Lease is the lease duration the holder wrote.
	Lease time.Duration
}

// Death is how the lease holder's node dies.
type Death string

const (
	// LinkDown: the node loses power or its link. Its switch port goes down, the switch forgets its MAC and floods
	// frames for it to every port.
	LinkDown Death = "link down"
	// Hung: the node stops answering while its link stays up (a hung kernel, a stuck NIC): it drops every IP packet.
	// The switch keeps forwarding frames for its MAC to it until ARP moves the VIP.
	Hung Death = "hung, link up"
)

// FailOver kills the lease holder's node as death says, its agent without a chance to hand over the lease, and
// measures until another node answers ARP for the VIP and HTTPS through the VIP works again. The dead node stays dead
// until the next Run.
func (c *Cluster) FailOver(ctx context.Context, exp *extensionsv1alpha1.SelfHostedShootExposure, death Death) (Failover, error) {
	var f Failover
	var err error
	if f.From, err = c.WaitForLeaseHolder(ctx, exp, ""); err != nil {
		return f, err
	}
	dead := c.nodes[f.From]
	deadMAC, err := dead.MAC()
	if err != nil {
		return f, err
	}
	if macs, err := c.WaitForARP(ctx, func(macs []string) bool { return slices.Equal(macs, []string{deadMAC}) }); err != nil {
		return f, fmt.Errorf("before the failover, ARP for the VIP is answered by %v, want only the holder %s's %s: %w", macs, f.From, deadMAC, err)
	}
	// The holder writes its lease duration at every renewal: after a restart with other timings, wait for it.
	want, err := c.configuredLeaseDuration()
	if err != nil {
		return f, err
	}
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		f.Lease = c.leaseDuration(ctx, exp)
		return f.Lease == want, nil
	}); err != nil {
		return f, fmt.Errorf("the L2 announcement lease says %s, the agents run with %s: %w", f.Lease, want, err)
	}
	c.disturb(f.From)
	start, err := dead.die(death)
	if err != nil {
		return f, err
	}
	// ARP and HTTPS are polled apart, each about every 200 ms with a short timeout, so that one's wait does not delay
	// the other's measurement.
	var polls sync.WaitGroup
	polls.Go(func() {
		_ = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
			if macs, _ := c.arpOnce(fixtures.ExposureVIP); len(macs) > 0 && !slices.Contains(macs, deadMAC) {
				f.ARP = time.Since(start)
				return true, nil
			}
			return false, nil
		})
	})
	polls.Go(func() {
		_ = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			ctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			if _, err := c.ReadyzThroughVIP(ctx); err == nil {
				f.HTTPS = time.Since(start)
				return true, nil
			}
			return false, nil
		})
	})
	polls.Wait()
	if f.ARP == 0 || f.HTTPS == 0 {
		return f, fmt.Errorf("after %s died, ARP was answered by a live node after %s, HTTPS after %s (0: never within 2 minutes)", f.From, f.ARP, f.HTTPS)
	}
	if f.To, err = c.WaitForLeaseHolder(ctx, exp, f.From); err != nil {
		return f, err
	}
	return f, nil
}

// APIServerOutage is what new connections through the VIP saw while one control-plane node's kube-apiserver was
// down and its node up.
type APIServerOutage struct {
	Node             string
	Attempts, Failed int
	// LastFailure is when, after the stop, the last attempt failed: how long new connections kept failing, within the
	// attempts' window (Window).
	LastFailure, Window time.Duration
}

// StopOneAPIServer stops the kube-apiserver of a control-plane node that does not hold the lease, sends attempts new
// requests through the VIP, about every 200 ms, and starts it again.
func (c *Cluster) StopOneAPIServer(ctx context.Context, exp *extensionsv1alpha1.SelfHostedShootExposure, attempts int) (o APIServerOutage, err error) {
	holder, err := c.WaitForLeaseHolder(ctx, exp, "")
	if err != nil {
		return o, err
	}
	i := slices.IndexFunc(c.Nodes(), func(n *Node) bool { return n.ControlPlane && n.Name != holder })
	down := c.Nodes()[i]
	o.Node = down.Name
	c.disturb(down.Name)
	if err := down.SwitchAPIServer(false); err != nil {
		return o, err
	}
	defer func() {
		if onErr := down.SwitchAPIServer(true); err == nil {
			err = onErr
		}
	}()
	start := time.Now()
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		attempt, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		if _, err := c.ReadyzThroughVIP(attempt); err != nil {
			o.Failed++
			o.LastFailure = time.Since(start)
		}
		o.Attempts++
		return o.Attempts == attempts, nil
	})
	o.Window = time.Since(start)
	return o, err
}
