package ciliumnodes

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/apiserverendpoints"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/cilium"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/ciliumchart"
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

// Upstream is upstream's chart of a Cilium version, admitted beside Gardener's; its agents run that version's binaries
// (ciliumbin.PathFor), with 1.19's operator, which LB-IPAM needs only.
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
	agent    *appsv1.DaemonSet
	operator *appsv1.Deployment
	config   *corev1.ConfigMap
	pods     map[string]*corev1.Pod
}

// Agents is what the agents run: one chart's admitted pods on every node (no chart: the one that runs, or Gardener's),
// the control-plane nodes' with lease timings (nil: cilium-config's, which the webhook sets from the exposure).
type Agents struct {
	Chart Chart
	Lease *LeaseTimings
	// ClientDefaults runs the pods without the client timeouts the webhook sets (as a pod admitted without them, or
	// an operator's value, would run): client-go's HTTP/2 health check and Cilium's dial timeout as they come.
	ClientDefaults bool
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

// LeaseTimings are the L2 announcer's lease duration, renew deadline and retry period.
type LeaseTimings struct{ Duration, RenewDeadline, RetryPeriod time.Duration }

// CiliumDefaultLease are the agent's own defaults (daemon/cmd/daemon_main.go), which an agent uses when cilium-config
// has no lease settings.
var CiliumDefaultLease = &LeaseTimings{Duration: 15 * time.Second, RenewDeadline: 5 * time.Second, RetryPeriod: 2 * time.Second}

func (l *LeaseTimings) String() string {
	if l == nil {
		return "the exposure's (cilium-config)"
	}
	return fmt.Sprintf("%s/%s/%s", l.Duration, l.RenewDeadline, l.RetryPeriod)
}

// flags override cilium-config's lease settings (the agent's flags take precedence over its config directory).
func (l *LeaseTimings) flags() []string {
	if l == nil {
		return nil
	}
	return []string{
		"--l2-announcements-lease-duration=" + l.Duration.String(),
		"--l2-announcements-renew-deadline=" + l.RenewDeadline.String(),
		"--l2-announcements-retry-period=" + l.RetryPeriod.String(),
	}
}

// install admits a chart: Gardener's is stored through kube-apiserver as real shoots get it (its RBAC, which names
// the agent's ServiceAccount as upstream's does, serves both); upstream's workloads are sent as dry runs.
func (c *Cluster) install(ctx context.Context, chart Chart) (*installation, error) {
	var rendered *ciliumchart.Objects
	var err error
	if chart == GardenerChart {
		rendered, err = ciliumchart.RenderGardener(ciliumchart.GardenerVersion, ciliumchart.GardenerValues(ciliumchart.GardenerVersion))
	} else {
		rendered, err = ciliumchart.Render(chart.version(), ciliumchart.Values(chart.version()))
	}
	if err != nil {
		return nil, err
	}
	inst := &installation{agent: rendered.Agent.DeepCopy(), operator: rendered.Operator.DeepCopy(), config: rendered.Config.DeepCopy(), pods: map[string]*corev1.Pod{}}
	if chart == GardenerChart {
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
	if chart == GardenerChart {
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

// storeConfig stores the chart's `cilium-config` through the webhook, as installing that chart does: upstream's
// build-config reads it from kube-apiserver, Gardener's chart mounts it. The extension's admission policy refuses the
// update while the webhook cannot pin it (unreachable, or answering from a view it does not trust yet); it is retried
// for a minute, as Gardener's resource manager retries a refused apply.
func (c *Cluster) storeConfig(ctx context.Context, inst *installation) error {
	var last error
	if err := wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: inst.config.Namespace, Name: inst.config.Name}}
		_, last = controllerutil.CreateOrUpdate(ctx, c.env.Client, cm, func() error {
			cm.Data = maps.Clone(inst.config.Data)
			return nil
		})
		return last == nil, ignoreRefused(last)
	}); err != nil {
		return fmt.Errorf("storing %s: %w (%v)", inst.config.Name, err, last)
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

// Run makes the agents run as want says, restarting those that do not (all of them when the chart changes, the
// control-plane nodes' when the lease timings do, and every node that died), and waits until every agent is ready.
// It returns the agent pods by node.
func (c *Cluster) Run(ctx context.Context, want Agents) (map[string]*corev1.Pod, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if want.Chart == "" {
		want.Chart = GardenerChart
		if c.running != nil {
			want.Chart = c.running.Chart
		}
	}
	// Gardener's chart first: its RBAC serves both.
	for _, chart := range []Chart{GardenerChart, want.Chart} {
		if c.installed[chart] == nil {
			inst, err := c.install(ctx, chart)
			if err != nil {
				return nil, err
			}
			c.installed[chart] = inst
		}
	}
	inst := c.installed[want.Chart]
	if c.running == nil || c.running.Chart != want.Chart {
		if err := c.storeConfig(ctx, inst); err != nil {
			return nil, err
		}
	}
	configMaps, err := c.kubeSystemConfigMaps(ctx)
	if err != nil {
		return nil, err
	}
	var restarts sync.WaitGroup
	errs := make(chan error, len(c.nodes))
	for _, n := range c.Nodes() {
		if c.running != nil && c.running.Chart == want.Chart && c.running.ClientDefaults == want.ClientDefaults &&
			(!n.ControlPlane || sameLease(c.running.Lease, want.Lease)) && n.running() && !n.stale() {
			continue
		}
		pod := inst.pods[n.Name]
		if want.ClientDefaults {
			pod = withClientDefaults(pod)
		}
		restarts.Go(func() { errs <- n.restart(ctx, c.env, pod, configMaps, want.Lease) })
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
	for _, n := range c.Nodes() {
		if err := n.WaitUntilReady(ctx); err != nil {
			return nil, err
		}
	}
	return inst.pods, nil
}

func sameLease(a, b *LeaseTimings) bool { return a == b || (a != nil && b != nil && *a == *b) }
