// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package ciliumnodes

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	gardencorev1beta1 "github.com/gardener/gardener/pkg/apis/core/v1beta1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/apiserverendpoints"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/cilium"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/exposure/ciliumconfig"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/ciliumchart"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/fixtures"
)

// Chart is a Cilium chart whose admitted agent pods run on the nodes.
type Chart string

const (
	// GardenerChart is Gardener's networking-cilium chart, installed in the cluster as real shoots get it.
	GardenerChart Chart = "networking-cilium"
	// UpstreamChart is upstream's chart of the same Cilium version, admitted beside it.
	UpstreamChart = Chart(upstreamPrefix + ciliumchart.GardenerVersion)
)

const upstreamPrefix = "cilium-"

// Upstream is upstream's chart of a Cilium version, admitted beside Gardener's; its agents and its operator run that
// version's binaries (ciliumbin.PathFor).
func Upstream(version string) Chart { return Chart(upstreamPrefix + version) }

// version is the Cilium version the chart deploys.
func (c Chart) version() string {
	if v, ok := strings.CutPrefix(string(c), upstreamPrefix); ok {
		return v
	}
	return ciliumchart.GardenerVersion
}

// installation is a chart as the webhook admitted it: its agent DaemonSet and operator Deployment (sent as dry runs
// for upstream's chart, whose objects are named as Gardener's), its `cilium-config`, and the agent pod of each node:
// for Gardener's chart the one Kubernetes' DaemonSet controller created and the scheduler bound to the node, for
// upstream's one created from the admitted DaemonSet as that controller would, as a dry run (a stored pod of the same
// labels would be the DaemonSet's to adopt).
type installation struct {
	// rendered is the agent DaemonSet as the chart renders it, before admission: the baseline's (Agents.Baseline).
	rendered *appsv1.DaemonSet
	agent    *appsv1.DaemonSet
	operator *appsv1.Deployment
	config   *corev1.ConfigMap
	pods     map[string]*corev1.Pod
}

// Agents is what the agents run: one chart's admitted pods on every node (no chart: the one that runs, or Gardener's),
// with the lease timings the Shoot's networking providerConfig sets (nil: none, and the webhook completes
// cilium-config with the exposure's).
type Agents struct {
	Chart Chart
	Lease *LeaseTimings
	// ClientDefaults are the nodes whose pods run without the client timeouts the webhook sets (as a pod admitted
	// without them, or an operator's value, would run): client-go's HTTP/2 health check and Cilium's dial timeout as
	// they come.
	ClientDefaults []string
	// Afresh restarts every agent, also those that run as wanted: agents that did not run through what a case did
	// before.
	Afresh bool
	// Baseline are the nodes whose agents run without the extension: from the chart's pods as it renders them, not
	// as the webhook admitted them, with the rendered cilium-config, reaching kube-apiserver through the `kubernetes`
	// ClusterIP (baseline.go).
	Baseline []string
}

// withClientDefaults is pod without the client timeouts the webhook sets (cilium.ClientTimeoutVars).
func withClientDefaults(pod *corev1.Pod) *corev1.Pod {
	pod = pod.DeepCopy()
	for _, containers := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range containers {
			containers[i].Env = slices.DeleteFunc(containers[i].Env, func(e corev1.EnvVar) bool { return slices.Contains(cilium.ClientTimeoutVars, e.Name) })
		}
	}
	return pod
}

// LeaseTimings are the L2 announcer's lease duration, renew deadline and retry period, as an operator sets them in the
// Shoot's networking providerConfig (networking-cilium's NetworkConfig l2Announcements.leaseDuration, ...).
type LeaseTimings struct{ Duration, RenewDeadline, RetryPeriod time.Duration }

// CiliumDefaultLease are the agent's own defaults (daemon/cmd/daemon_main.go), which networking-cilium's values.yaml
// repeats.
var CiliumDefaultLease = &LeaseTimings{Duration: 15 * time.Second, RenewDeadline: 5 * time.Second, RetryPeriod: 2 * time.Second}

func (l *LeaseTimings) String() string {
	if l == nil {
		return "the exposure's (cilium-config)"
	}
	return fmt.Sprintf("%s/%s/%s", l.Duration, l.RenewDeadline, l.RetryPeriod)
}

// networkConfig is the Shoot's networking providerConfig with l's timings in l2Announcements (test/framework/fixtures's when l
// is nil).
func (l *LeaseTimings) networkConfig() ([]byte, error) {
	nc := map[string]any{}
	if err := json.Unmarshal([]byte(fixtures.NetworkConfig), &nc); err != nil {
		return nil, err
	}
	if l != nil {
		maps.Copy(nc["l2Announcements"].(map[string]any), l.values())
	}
	return json.Marshal(nc)
}

// values are l's timings as the charts' l2announcements values name them: networking-cilium turns the NetworkConfig's
// into its chart's global.l2announcements (pkg/charts/utils.go, with Duration.String()); upstream's chart has the same
// keys at the top.
func (l *LeaseTimings) values() map[string]any {
	return map[string]any{"leaseDuration": l.Duration.String(), "leaseRenewDeadline": l.RenewDeadline.String(), "leaseRetryPeriod": l.RetryPeriod.String()}
}

// render renders chart as it is installed with lease timings from the Shoot's NetworkConfig (nil: none).
func render(chart Chart, lease *LeaseTimings) (*ciliumchart.Objects, error) {
	if chart == GardenerChart {
		values := ciliumchart.GardenerValues(ciliumchart.GardenerVersion)
		if lease != nil {
			maps.Copy(values["global"].(map[string]any)["l2announcements"].(map[string]any), lease.values())
		}
		return ciliumchart.RenderGardener(ciliumchart.GardenerVersion, values)
	}
	values := ciliumchart.Values(chart.version())
	if lease != nil {
		maps.Copy(values["l2announcements"].(map[string]any), lease.values())
	}
	return ciliumchart.Render(chart.version(), values)
}

// install admits a chart: the cluster's stored chart (Options.Stored) is stored through kube-apiserver as a cluster on
// it has it installed (its RBAC, which names the agent's ServiceAccount as the other charts do, serves them all); the
// other charts' workloads are sent as dry runs.
func (c *Cluster) install(ctx context.Context, chart Chart) (*installation, error) {
	rendered, err := render(chart, nil)
	if err != nil {
		return nil, err
	}
	inst := &installation{rendered: rendered.Agent.DeepCopy(), agent: rendered.Agent.DeepCopy(), operator: rendered.Operator.DeepCopy(), config: rendered.Config.DeepCopy(), pods: map[string]*corev1.Pod{}}
	if chart == c.stored {
		for _, obj := range rendered.All {
			// Not Envoy's DaemonSet: the agents here run without Envoy (agentFlags), which cannot run here. Its pods,
			// never ready, would count as replacements still starting, and re-pinning would wait BatchTimeout for
			// them before each batch.
			if obj == client.Object(rendered.Envoy) {
				continue
			}
			if err := c.env.Client.Create(ctx, obj.DeepCopyObject().(client.Object)); err != nil && !apierrors.IsAlreadyExists(err) {
				return nil, fmt.Errorf("creating %T %s: %w", obj, obj.GetName(), err)
			}
		}
	}
	for _, obj := range []client.Object{inst.agent, inst.operator} {
		if err := c.dryRun(ctx, obj); err != nil {
			return nil, fmt.Errorf("%s: admitting %T %s: %w", chart, obj, obj.GetName(), err)
		}
	}
	if !slices.ContainsFunc(inst.agent.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == apiserverendpoints.VolumeName }) {
		return nil, fmt.Errorf("%s: the webhook did not pin the agent DaemonSet", chart)
	}
	if chart == c.stored {
		return inst, c.waitForDaemonSetPods(ctx, inst)
	}
	for _, n := range c.Nodes() {
		pod := ciliumchart.DaemonSetPod(inst.agent, n.Name)
		if err := c.admit(ctx, pod); err != nil {
			return nil, err
		}
		inst.pods[n.Name] = pod
	}
	return inst, nil
}

// admit sends pod through admission as a dry run and leaves it as admitted.
func (c *Cluster) admit(ctx context.Context, pod *corev1.Pod) error {
	if err := c.env.Client.Create(ctx, pod, client.DryRunAll); err != nil {
		return err
	}
	pod.UID = "" // kube-apiserver fills it in for a dry run too, but no such pod exists to bind a token to
	return nil
}

// dryRun sends obj through admission without storing it: a create, or an update of the stored object of that name.
func (c *Cluster) dryRun(ctx context.Context, obj client.Object) error {
	err := c.env.Client.Create(ctx, obj, client.DryRunAll)
	if !apierrors.IsAlreadyExists(err) {
		return err
	}
	// The DaemonSet controller writes the stored object's status meanwhile.
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		current := obj.DeepCopyObject().(client.Object)
		if err := c.env.Client.Get(ctx, client.ObjectKeyFromObject(obj), current); err != nil {
			return err
		}
		obj.SetResourceVersion(current.GetResourceVersion())
		return c.env.Client.Update(ctx, obj, client.DryRunAll)
	})
}

// configure gives the agents of chart the lease timings of the Shoot's NetworkConfig as an operator's change does: the
// Cluster resource's shoot (which the webhook reads) gets them, and the chart's `cilium-config`, rendered with them as
// networking-cilium renders it, is stored through the webhook.
func (c *Cluster) configure(ctx context.Context, chart Chart, lease *LeaseTimings) error {
	rendered, err := render(chart, lease)
	if err != nil {
		return err
	}
	if err := c.setNetworkConfig(ctx, lease); err != nil {
		return err
	}
	var stored string
	// The webhook reads the Cluster from its cache: until that has the change, it writes the timings of the one before.
	if err := wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := c.storeConfig(ctx, rendered.Config); err != nil {
			return false, err
		}
		configMaps, err := c.kubeSystemConfigMaps(ctx)
		if err != nil {
			return false, err
		}
		stored = configMaps[cilium.ConfigMapName][ciliumconfig.KeyL2LeaseDuration]
		if lease != nil {
			return stored == lease.Duration.String(), nil
		}
		// Without timings of its own the webhook writes the exposure's, none at all for a BGP exposure.
		return c.configuredLease == nil || stored != c.configuredLease.Duration.String(), nil
	}); err != nil {
		return fmt.Errorf("cilium-config with lease timings %s: its lease duration is %q: %w", lease, stored, err)
	}
	c.configuredLease, c.configuredAt, c.configuredFor = lease, time.Now(), c.announced
	return nil
}

// setNetworkConfig sets the Cluster resource's shoot's networking providerConfig with lease.
func (c *Cluster) setNetworkConfig(ctx context.Context, lease *LeaseTimings) error {
	raw, err := lease.networkConfig()
	if err != nil {
		return err
	}
	return c.env.UpdateShoot(ctx, func(shoot *gardencorev1beta1.Shoot) {
		shoot.Spec.Networking.ProviderConfig = &runtime.RawExtension{Raw: raw}
	})
}

// storeConfig stores the chart's `cilium-config` through the webhook, as installing that chart does: upstream's
// build-config reads it from kube-apiserver, Gardener's chart mounts it. The extension's admission policy refuses the
// update while the webhook cannot pin it (unreachable, or answering from a view it does not trust yet); it is retried
// for a minute, as Gardener's resource manager retries a refused apply.
func (c *Cluster) storeConfig(ctx context.Context, config *corev1.ConfigMap) error {
	var last, refused error
	if err := wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		// Updated even when the data look the same, as the resource manager updates the whole object: what the stored
		// one holds may be the webhook's completion of another Shoot configuration.
		cm := &corev1.ConfigMap{}
		if last = c.env.Client.Get(ctx, client.ObjectKeyFromObject(config), cm); apierrors.IsNotFound(last) {
			cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: config.Namespace, Name: config.Name}, Data: maps.Clone(config.Data)}
			last = c.env.Client.Create(ctx, cm)
		} else if last == nil {
			cm.Data = maps.Clone(config.Data)
			last = c.env.Client.Update(ctx, cm)
		}
		if last != nil && ignoreRefused(last) == nil {
			refused = last
		}
		return last == nil, ignoreRefused(last)
	}); err != nil {
		return fmt.Errorf("storing %s: %w (last refusal: %v)", config.Name, err, refused)
	}
	return nil
}

// ignoreRefused is err unless admission refused the request (Forbidden, Invalid) or it conflicted, which a retry may
// get past.
func ignoreRefused(err error) error {
	if apierrors.IsForbidden(err) || apierrors.IsInvalid(err) || apierrors.IsConflict(err) {
		return nil
	}
	return err
}

// kubeSystemConfigMaps are the stored ConfigMaps of Cilium's namespace by name, for the pods' volumes and env.
func (c *Cluster) kubeSystemConfigMaps(ctx context.Context) (map[string]map[string]string, error) {
	list := &corev1.ConfigMapList{}
	if err := c.env.Client.List(ctx, list, client.InNamespace(cilium.Namespace)); err != nil {
		return nil, err
	}
	out := map[string]map[string]string{}
	for _, cm := range list.Items {
		out[cm.Name] = cm.Data
	}
	return out, nil
}

// Run makes the agents run as want says, restarting those that do not (all of them when the chart changes or want
// says afresh, the control-plane nodes' when the lease timings or the exposure's announcement change cilium-config,
// and every node that died), and waits until every agent is ready. It returns the agent pods by node.
func (c *Cluster) Run(ctx context.Context, want Agents) (map[string]*corev1.Pod, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if want.Chart == "" {
		want.Chart = c.stored
		if c.running != nil {
			want.Chart = c.running.Chart
		}
	}
	// The stored chart first: its RBAC serves them all.
	if _, err := c.installOnce(ctx, c.stored); err != nil {
		return nil, err
	}
	inst, err := c.installOnce(ctx, want.Chart)
	if err != nil {
		return nil, err
	}
	// After the exposure's announcement or the lease timings changed, cilium-config is stored again as Gardener's
	// resource manager applies it, and the control-plane agents restart if it changed: they read it only when they
	// start. On a shoot networking-cilium's DaemonSet rolls them on a change of its chart's rendered ConfigMap
	// (`checksum/configmap-cilium`), and a change that the webhook alone makes (the exposure's lease timings) reaches
	// them at their next start (docs/bgp.md); a change that leaves cilium-config as it was (BGP timers, graceful
	// restart, the drain selector) reaches the running agents through Cilium's resources alone.
	reconfigure := c.running == nil || c.running.Chart != want.Chart || !sameLease(c.running.Lease, want.Lease) ||
		c.configuredFor != c.announced
	configMaps, err := c.kubeSystemConfigMaps(ctx)
	if err != nil {
		return nil, err
	}
	if reconfigure {
		before, running := configMaps[cilium.ConfigMapName], c.running
		// cilium-config may be stored anew even when this fails: the next Run then starts every agent afresh.
		c.running = nil
		if err := c.configure(ctx, want.Chart, want.Lease); err != nil {
			return nil, err
		}
		if configMaps, err = c.kubeSystemConfigMaps(ctx); err != nil {
			return nil, err
		}
		c.running, reconfigure = running, !maps.Equal(before, configMaps[cilium.ConfigMapName])
	}
	var restarts sync.WaitGroup
	errs := make(chan error, len(c.nodes))
	for _, n := range c.Nodes() {
		baseline := slices.Contains(want.Baseline, n.Name)
		defaults := slices.Contains(want.ClientDefaults, n.Name)
		if !want.Afresh && c.running != nil && c.running.Chart == want.Chart && slices.Contains(c.running.ClientDefaults, n.Name) == defaults &&
			slices.Contains(c.running.Baseline, n.Name) == baseline && (!n.ControlPlane || !reconfigure) && n.running() && !n.stale() {
			continue
		}
		pod := inst.pods[n.Name]
		if defaults {
			pod = withClientDefaults(pod)
		}
		if baseline {
			restarts.Go(func() { errs <- c.startBaseline(ctx, n, inst, pod, configMaps) })
			continue
		}
		restarts.Go(func() { errs <- n.restart(ctx, c.env, pod, configMaps) })
	}
	restarts.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			c.running = nil
			return nil, err
		}
	}
	c.running = &want
	if err := c.useOperatorOf(ctx, want.Chart); err != nil {
		return nil, err
	}
	// Tests start from agents that have been running a while, as on a cluster in use: ready, and their programs
	// attached to their nodes' devices.
	for _, n := range c.Nodes() {
		if err := n.WaitUntilReady(ctx); err != nil {
			return nil, err
		}
		if err := n.WaitUntilAttached(ctx); err != nil {
			return nil, err
		}
	}
	return inst.pods, nil
}

// installOnce installs chart unless it was installed before, and returns its installation. c.mu is held.
func (c *Cluster) installOnce(ctx context.Context, chart Chart) (*installation, error) {
	if c.installed[chart] == nil {
		inst, err := c.install(ctx, chart)
		if err != nil {
			return nil, err
		}
		c.installed[chart] = inst
	}
	return c.installed[chart], nil
}

// AgentStarts is how many agents the harness has started on the cluster's nodes, each a few CPU-seconds of compiling
// and loading BPF programs: what a test's restarts cost.
func (c *Cluster) AgentStarts() int {
	total := 0
	for _, n := range c.Nodes() {
		n.mu.Lock()
		total += n.starts
		n.mu.Unlock()
	}
	return total
}

func sameLease(a, b *LeaseTimings) bool { return a == b || (a != nil && b != nil && *a == *b) }
