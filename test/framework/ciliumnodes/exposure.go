// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package ciliumnodes

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	extensionsv1alpha1 "github.com/gardener/gardener/pkg/apis/extensions/v1alpha1"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/cilium"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/controller/l2handover"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/exposure/ciliumconfig"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/exposure/resources"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/ciliumchart"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/ciliumoperator"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/fixtures"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/podrun"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/testenv"
)

// Expose runs the agents unless they run, starts the operator of their Cilium version from its admitted pod
// (startOperator), creates the shoot's exposure as gardenadm does and waits until the extension reports the VIP and an
// agent holds the announcement lease, once; later calls return that exposure.
func (c L2) Expose(ctx context.Context) (*extensionsv1alpha1.SelfHostedShootExposure, error) {
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

// startOperator admits the operator pod of the Cilium version whose agents run (the stored chart's for its version, as
// before any switch) and runs its operator container on OperatorNode. The pod is admitted as a dry run: stored, kube-scheduler would bind it to whatever node it picks,
// where no kubelet would ever report it ready.
func (c *Cluster) startOperator(ctx context.Context) error {
	chart := c.stored
	if c.running != nil && c.running.Chart.version() != chart.version() {
		chart = c.running.Chart
	}
	pod := ciliumchart.DeploymentPod(c.installed[chart].operator)
	if err := c.admit(ctx, pod); err != nil {
		return err
	}
	c.operatorPod, c.operatorChart, c.operatorExited = pod, chart, time.Time{}
	if err := c.runOperator(ctx); err != nil {
		c.operatorChart = "" // none runs: the next Run starts one again
		return err
	}
	return nil
}

// useOperatorOf replaces a running operator of another Cilium version than chart's with chart's, stopping it as
// kubelet stops a replaced pod's container: each line runs its own operator, as a cluster on that version does.
func (c *Cluster) useOperatorOf(ctx context.Context, chart Chart) error {
	if c.operatorPod == nil || (c.operatorChart != "" && c.operatorChart.version() == chart.version()) {
		return nil
	}
	n := c.nodes[OperatorNode]
	n.mu.Lock()
	operator := n.operator
	n.operator = nil // no longer the node's: the nodes' kubelet leaves it stopped
	n.mu.Unlock()
	if operator != nil {
		stopCtx, cancel := context.WithTimeout(ctx, gracePeriod(c.operatorPod))
		operator.Stop(stopCtx)
		cancel()
	}
	return c.startOperator(ctx)
}

// runOperator runs the operator container of the admitted operator pod on OperatorNode, with the ConfigMaps as
// stored now (a restarted container sees its volumes as kubelet last synced them).
func (c *Cluster) runOperator(ctx context.Context) error {
	configMaps, err := c.kubeSystemConfigMaps(ctx)
	if err != nil {
		return err
	}
	// As in the connection suite: the operator's serve addresses, and Cilium's CRDs left as the test installed them.
	configMaps[cilium.ConfigMapName] = maps.Clone(configMaps[cilium.ConfigMapName])
	maps.Copy(configMaps[cilium.ConfigMapName], ciliumoperator.Config(9234, 9963))
	ct, err := podrun.ForPod(ctx, c.env, c.operatorPod, "cilium-operator")
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
func (c L2) AnnouncementLease(ctx context.Context, exp *extensionsv1alpha1.SelfHostedShootExposure) (*coordinationv1.Lease, error) {
	lease := &coordinationv1.Lease{}
	return lease, c.env.Client.Get(ctx, l2handover.LeaseKey(exp), lease)
}

// LeaseHolder is the node that holds the exposure's L2 announcement lease, "" when none does.
func (c L2) LeaseHolder(ctx context.Context, exp *extensionsv1alpha1.SelfHostedShootExposure) (string, error) {
	lease, err := c.AnnouncementLease(ctx, exp)
	if err != nil || lease.Spec.HolderIdentity == nil {
		return "", client.IgnoreNotFound(err)
	}
	return *lease.Spec.HolderIdentity, nil
}

// WaitForLeaseHolder waits until a node other than not holds the lease, and returns it.
func (c L2) WaitForLeaseHolder(ctx context.Context, exp *extensionsv1alpha1.SelfHostedShootExposure, not string) (string, error) {
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
	lease, err := c.L2().AnnouncementLease(ctx, exp)
	if err != nil || lease.Spec.LeaseDurationSeconds == nil {
		return 0
	}
	return time.Duration(*lease.Spec.LeaseDurationSeconds) * time.Second
}

// configuredLeaseDuration is the lease duration the control-plane agents run with: cilium-config's as stored.
func (c *Cluster) configuredLeaseDuration() (time.Duration, error) {
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
func (c L2) ARP(ip string) ([]string, error) { return c.arping(ip, "-c", "3", "-w", "4") }

// Answerers names the nodes whose MAC addresses are in macs, in their order; an address of no node stays as it is.
func (c L2) Answerers(macs []string) []string {
	names := slices.Clone(macs)
	for _, n := range c.nodes {
		if mac, err := n.MAC(); err == nil {
			if i := slices.Index(macs, mac); i >= 0 {
				names[i] = n.Name
			}
		}
	}
	return names
}

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
func (c L2) WaitForARP(ctx context.Context, done func(macs []string) bool) ([]string, error) {
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
func (c L2) ReadyzThroughVIP(ctx context.Context) (string, error) {
	return c.readyzThroughVIP(ctx, c.Client.DialContext)
}

// readyzThroughVIP sends GET /readyz to the VIP over dial, verifying the certificate under the shoot's API name.
func (c *Cluster) readyzThroughVIP(ctx context.Context, dial func(ctx context.Context, network, addr string) (net.Conn, error)) (string, error) {
	tlsConfig, err := rest.TLSConfigFor(c.env.Config)
	if err != nil {
		return "", err
	}
	tlsConfig.ServerName = ciliumchart.ExternalHost
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsConfig, DialContext: dial, DisableKeepAlives: true}}
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
	// HandedOver is the extension's HandedOver event of the failover on the exposure, "" when the lease moved
	// without it (it expired).
	HandedOver string
	// LeaseMove is how the lease went from From to To.
	LeaseMove LeaseMove
}

// Death is how the lease holder's node dies.
type Death string

const (
	// LinkDown: the node loses power or its link. Its switch port goes down, the switch forgets its MAC and floods
	// frames for it to every port.
	LinkDown Death = "link down"
	// Hung: the node stops answering while its link stays up (a hung kernel, a stuck NIC): nothing goes in or out of
	// its NIC, ARP included. The switch keeps forwarding frames for its MAC to it until ARP moves the VIP.
	Hung Death = "hung, link up"
)

// FailOver kills the lease holder's node as death says, its agent without a chance to hand over the lease, and
// measures until another node answers ARP for the VIP and HTTPS through the VIP works again. The dead node stays dead
// until the next Run.
func (c L2) FailOver(ctx context.Context, exp *extensionsv1alpha1.SelfHostedShootExposure, death Death) (Failover, error) {
	var f Failover
	var err error
	if f.Lease, err = c.timingsSettled(ctx, exp); err != nil {
		return f, err
	}
	// The holder is read after the agents' timings settled, until which the lease may still move.
	dead, deadMAC, err := c.settledHolder(ctx, exp)
	if err != nil {
		return f, fmt.Errorf("before the failover: %w", err)
	}
	f.From = dead.Name
	if err := c.clientThrough(ctx, dead, deadMAC); err != nil {
		return f, err
	}
	c.disturb(f.From)
	events, err := c.handoverEvents(ctx, exp)
	if err != nil {
		return f, err
	}
	stopTimeline, err := c.leaseTimeline(ctx, exp)
	if err != nil {
		return f, err
	}
	defer func() {
		if stopTimeline != nil {
			stopTimeline(nil)
		}
	}()
	start, err := dead.die(death)
	if err != nil {
		return f, err
	}
	f.ARP, f.HTTPS = c.measureFailover(ctx, deadMAC, start)
	if f.ARP == 0 || f.HTTPS == 0 {
		macs, _ := c.ARP(fixtures.ExposureVIP)
		holder, _ := c.LeaseHolder(ctx, exp)
		return f, fmt.Errorf("after %s died, ARP was answered by a live node after %s, HTTPS after %s (0: never within 2 minutes); now arping gets %v, the lease is held by %q",
			f.From, f.ARP, f.HTTPS, macs, holder)
	}
	if f.To, err = c.WaitForLeaseHolder(ctx, exp, f.From); err != nil {
		return f, err
	}
	if f.HandedOver, err = c.newHandoverEvent(ctx, exp, events, f.From); err != nil {
		return f, err
	}
	handedOver := f.HandedOver != ""
	// The new holder's agent renews the term handed to it a moment before it answers ARP: its write is waited for.
	versions := stopTimeline(func(versions []LeaseVersion) bool {
		m := moveOf(versions, f.From, f.To, start, handedOver)
		return m.Moved > 0 && (!handedOver || m.TakenUp > m.Moved)
	})
	stopTimeline = nil
	f.LeaseMove = moveOf(versions, f.From, f.To, start, handedOver)
	return f, nil
}

// timingsSettled waits until the lease says the duration the agents run with (which it returns) and the extension's
// handover has read cilium-config's timings.
func (c *Cluster) timingsSettled(ctx context.Context, exp *extensionsv1alpha1.SelfHostedShootExposure) (time.Duration, error) {
	// The holder writes its lease duration at every renewal: after a restart with other timings, wait for it.
	want, err := c.configuredLeaseDuration()
	if err != nil {
		return 0, err
	}
	var lease time.Duration
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		lease = c.leaseDuration(ctx, exp)
		return lease == want, nil
	}); err != nil {
		return lease, fmt.Errorf("the L2 announcement lease says %s, the agents run with %s: %w", lease, want, err)
	}
	// The extension's handover reads cilium-config's timings at most every TimingsMaxAge, as it would after an
	// operator's change.
	c.mu.Lock()
	configuredAt := c.configuredAt
	c.mu.Unlock()
	select {
	case <-time.After(time.Until(configuredAt.Add(l2handover.TimingsMaxAge))):
		return lease, nil
	case <-ctx.Done():
		return lease, ctx.Err()
	}
}

// clientThrough waits until the client reaches the VIP through holder (holderMAC) and the VIP serves.
func (c *Cluster) clientThrough(ctx context.Context, holder *Node, holderMAC string) error {
	// The client talks to the VIP through the holder, as a client that has been using it does: its neighbour entry
	// resolved afresh while only the holder answers. An entry left from an earlier holder would send the client's
	// packets to a node that is still alive, whose Cilium load-balances the VIP as well.
	if err := c.Client.IP("neigh", "flush", "to", fixtures.ExposureVIP); err != nil {
		return err
	}
	if err := c.waitServing(ctx); err != nil {
		return fmt.Errorf("before the failover: %w", err)
	}
	if entry := c.clientNeighbour(); !strings.Contains(entry, holderMAC) {
		return fmt.Errorf("before the failover, the client's neighbour entry for the VIP is %q, want the holder %s's %s", entry, holder.Name, holderMAC)
	}
	return nil
}

// measureFailover measures, from start on, until a node other than the dead one (deadMAC) answers ARP for the VIP and
// until HTTPS through the VIP works again, each for at most two minutes (0: never). They are watched apart, so that
// one's wait does not delay the other's measurement: ARP asked every arpInterval on a socket of its own, a new HTTPS
// request started every httpsInterval, each with a second to succeed.
func (c *Cluster) measureFailover(ctx context.Context, deadMAC string, start time.Time) (arp, https time.Duration) {
	var polls sync.WaitGroup
	polls.Go(func() {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		if _, at, err := arpWatch(ctx, c.Client, fixtures.ExposureVIP, deadMAC); err == nil {
			arp = at.Sub(start)
		}
	})
	polls.Go(func() {
		if at, ok := c.firstHTTPS(ctx, 2*time.Minute); ok {
			https = at.Sub(start)
		}
	})
	polls.Wait()
	return arp, https
}

// settledHolder waits until ARP for the VIP is answered by the lease holder alone, and returns it with its MAC. The
// holder is read afresh each time: right after agents restart, the lease may still move legitimately (the extension
// hands it away from a holder whose kube-apiserver it has not yet seen ready again), and the node that answers ARP
// follows it.
func (c *Cluster) settledHolder(ctx context.Context, exp *extensionsv1alpha1.SelfHostedShootExposure) (*Node, string, error) {
	events, err := c.handoverEvents(ctx, exp)
	if err != nil {
		return nil, "", err
	}
	var holder, mac string
	var macs, holders []string
	err = wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		h, err := c.L2().LeaseHolder(ctx, exp)
		if err != nil || c.nodes[h] == nil {
			return false, err
		}
		if holder = h; !slices.Contains(holders, h) {
			holders = append(holders, h)
		}
		if mac, err = c.nodes[h].MAC(); err != nil {
			return false, err
		}
		macs, err = c.L2().ARP(fixtures.ExposureVIP)
		return slices.Equal(macs, []string{mac}), err
	})
	if err != nil {
		var handovers []string
		if now, herr := c.handoverEvents(ctx, exp); herr == nil {
			handovers = newMessages(events, now)
		}
		return nil, "", fmt.Errorf("ARP for the VIP is answered by %v (%v), want only the lease holder %q's %s "+
			"(holders seen %v; handovers meanwhile %q): %w", macs, c.L2().Answerers(macs), holder, mac, holders, handovers, err)
	}
	return c.nodes[holder], mac, nil
}

// httpsInterval is how often firstHTTPS starts a request: the resolution of the HTTPS times it measures.
const httpsInterval = 100 * time.Millisecond

// firstHTTPS starts a new request through the VIP every httpsInterval, each with a second to succeed, and returns
// when the first one succeeded; false when none did within timeout.
func (c *Cluster) firstHTTPS(ctx context.Context, timeout time.Duration) (time.Time, bool) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	succeeded := make(chan time.Time, 1)
	var attempts sync.WaitGroup
	defer attempts.Wait()
	ticker := time.NewTicker(httpsInterval)
	defer ticker.Stop()
	for {
		attempts.Go(func() {
			attempt, cancelAttempt := context.WithTimeout(ctx, time.Second)
			defer cancelAttempt()
			if _, err := c.L2().ReadyzThroughVIP(attempt); err == nil {
				select {
				case succeeded <- time.Now():
				default:
				}
			}
		})
		select {
		case at := <-succeeded:
			cancel()
			return at, true
		case <-ctx.Done():
			return time.Time{}, false
		case <-ticker.C:
		}
	}
}

// handoverEvents are the extension's HandedOver events on the exposure, by name.
func (c *Cluster) handoverEvents(ctx context.Context, exp *extensionsv1alpha1.SelfHostedShootExposure) (map[string]corev1.Event, error) {
	list := &corev1.EventList{}
	if err := c.env.Client.List(ctx, list, client.InNamespace(exp.Namespace)); err != nil {
		return nil, err
	}
	out := map[string]corev1.Event{}
	for _, e := range list.Items {
		if e.InvolvedObject.Name == exp.Name && e.Reason == l2handover.EventHandedOver {
			out[e.Name] = e
		}
	}
	return out, nil
}

// newMessages are the messages of the events of now that are not among before, in the order of their names. Each
// handover is an event of its own (it names the lease as written, l2handover's events_test), never a repeat that
// counts up.
func newMessages(before, now map[string]corev1.Event) []string {
	var messages []string
	for _, name := range slices.Sorted(maps.Keys(now)) {
		if _, ok := before[name]; !ok {
			messages = append(messages, now[name].Message)
		}
	}
	return messages
}

// newHandoverEvent is the message of a HandedOver event on the exposure that is not among before (each handover is an
// event of its own: it names the lease as written, l2handover's events_test), the one of a handover from holder if there is one, "" when there is none. After a failover the lease
// may be handed more than once (a handover undone, a lease its new holder released taken again). The recorder writes
// events asynchronously: it is waited for a little.
func (c *Cluster) newHandoverEvent(ctx context.Context, exp *extensionsv1alpha1.SelfHostedShootExposure, before map[string]corev1.Event, holder string) (string, error) {
	var message string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 5*time.Second, true, func(ctx context.Context) (bool, error) {
		now, err := c.handoverEvents(ctx, exp)
		if err != nil {
			return false, nil // the client's rate limit near the deadline: the next look, or none
		}
		for _, m := range newMessages(before, now) {
			if message = m; strings.Contains(m, "from "+holder+" to ") {
				return true, nil
			}
		}
		return false, nil
	})
	if wait.Interrupted(err) {
		return message, nil
	}
	return message, err
}

// clientNeighbour is the client's neighbour entry for the VIP, with the name of the node whose MAC it holds: where the
// client's packets to the VIP go.
func (c *Cluster) clientNeighbour() string {
	out, err := exec.Command("ip", "-n", c.Client.Name(), "neigh", "show", "to", fixtures.ExposureVIP).Output()
	if err != nil {
		return fmt.Sprintf("unreadable: %v", err)
	}
	entry := strings.TrimSpace(string(out))
	for _, n := range c.Nodes() {
		if mac, err := n.MAC(); err == nil && strings.Contains(entry, mac) {
			return entry + " (" + n.Name + ")"
		}
	}
	return entry
}

// AgentViews says, for every control-plane node, which backends its agent load-balances the VIP to and which
// kube-apiservers it is connected to.
func (c L2) AgentViews(ctx context.Context) string {
	var views []string
	for _, n := range c.Nodes() {
		if n.ControlPlane {
			views = append(views, n.Name+": "+c.backendsAt(ctx, n.Name))
		}
	}
	return strings.Join(views, "; ")
}

// backendsAt says which backends node's agent load-balances the VIP's port 443 to, and which kube-apiservers it is
// connected to.
func (c *Cluster) backendsAt(ctx context.Context, node string) string {
	n, ok := c.nodes[node]
	if !ok {
		return "unknown (no node " + node + ")"
	}
	backends, err := n.Backends(ctx, fixtures.ExposureVIP, 443)
	if err != nil {
		return fmt.Sprintf("unknown (%v)", err)
	}
	peers, err := n.APIServerPeers()
	if err != nil {
		return fmt.Sprintf("%v, agent's kube-apiservers unknown (%v)", backends, err)
	}
	return fmt.Sprintf("%v, agent connected to %v", backends, peers)
}

// servingInARow is how many requests in a row through the VIP must succeed before it counts as serving.
const servingInARow = 5

// WaitUntilServing waits until only the lease holder answers ARP for the VIP and servingInARow new requests in a row
// succeed through it, and returns the holder. An agent reports ready and takes the lease before its programs are
// attached to the node's device (they are compiled first, for seconds when agents start together): until then the
// VIP goes unanswered.
func (c L2) WaitUntilServing(ctx context.Context, exp *extensionsv1alpha1.SelfHostedShootExposure) (string, error) {
	// The lease may move while the requests run (settledHolder): then the new holder is waited for again.
	var moves []string
	for range 3 {
		holder, _, err := c.settledHolder(ctx, exp)
		if err != nil {
			return "", err
		}
		if err := c.waitServing(ctx); err != nil {
			return "", err
		}
		now, err := c.L2().LeaseHolder(ctx, exp)
		if err != nil || now == holder.Name {
			return holder.Name, err
		}
		moves = append(moves, holder.Name+" to "+now)
	}
	return "", fmt.Errorf("the L2 announcement lease kept moving while the VIP was tried: %v", moves)
}

// waitServing waits until servingInARow new requests in a row succeed through the VIP.
func (c *Cluster) waitServing(ctx context.Context) error {
	inARow := 0
	var last error
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		if last = c.attempt(ctx); last != nil {
			inARow = 0
		} else {
			inARow++
		}
		return inARow >= servingInARow, nil
	}); err != nil {
		return fmt.Errorf("the VIP does not serve %d requests in a row: %v: %w", servingInARow, last, err)
	}
	return nil
}

// attempt is one new request through the VIP.
func (c *Cluster) attempt(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err := c.L2().ReadyzThroughVIP(ctx)
	return err
}

// published says, by node, whether the exposure's EndpointSlices publish its endpoint as ready.
func (c *Cluster) published(ctx context.Context, exp *extensionsv1alpha1.SelfHostedShootExposure) (map[string]bool, error) {
	list := &discoveryv1.EndpointSliceList{}
	if err := c.env.Client.List(ctx, list, client.InNamespace(exp.Namespace), client.MatchingLabels{discoveryv1.LabelServiceName: resources.ServiceName(exp.Name)}); err != nil {
		return nil, err
	}
	ready := map[string]bool{}
	for _, s := range list.Items {
		for _, e := range s.Endpoints {
			ready[ptr.Deref(e.NodeName, "?")] = ptr.Deref(e.Conditions.Ready, true)
		}
	}
	return ready, nil
}

// publishedEndpoints says which endpoints the exposure's EndpointSlices publish as ready, as node:ready pairs.
func (c *Cluster) publishedEndpoints(ctx context.Context, exp *extensionsv1alpha1.SelfHostedShootExposure) string {
	ready, err := c.published(ctx, exp)
	if err != nil {
		return fmt.Sprintf("unknown (%v)", err)
	}
	var pairs []string
	for _, node := range slices.Sorted(maps.Keys(ready)) {
		pairs = append(pairs, fmt.Sprintf("%s:%t", node, ready[node]))
	}
	return fmt.Sprint(pairs)
}

// endpointReady says whether the exposure's EndpointSlices publish node's endpoint as ready.
func (c *Cluster) endpointReady(ctx context.Context, exp *extensionsv1alpha1.SelfHostedShootExposure, n *Node) (bool, error) {
	published, err := c.published(ctx, exp)
	if err != nil {
		return false, err
	}
	ready, ok := published[n.Name]
	if !ok {
		return false, fmt.Errorf("the exposure publishes no endpoint of %s", n.Name)
	}
	return ready, nil
}
