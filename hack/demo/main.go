// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

// Command demo shows the extension at work on a self-hosted shoot in an embedded control plane: kube-apiserver and
// etcd built from source with Gardener's and Cilium's CRDs, a self-hosted Cluster with 3 control-plane and 2 worker
// Nodes, the extension binary and Cilium's real operator started with their production flags, and Cilium's real
// chart applied with one agent pod per node, created the way the DaemonSet controller would. It prints how each
// Cilium pod reaches kube-apiserver, then exposes kube-apiserver on a Cilium VIP and deletes the exposure again. As
// root, the extension's image (make image's) runs as its chart's pod on cp-0 for those parts (image.go).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	extensionsv1alpha1 "github.com/gardener/gardener/pkg/apis/extensions/v1alpha1"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/apiserverendpoints"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/cilium"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/ciliumchart"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/ciliumfake"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/ciliumoperator"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/fixtures"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/podrun"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/testenv"
)

func main() {
	extension := flag.String("extension", "bin/linux_"+runtime.GOARCH+"/gardener-extension-cilium-selfhosted", "the extension binary (make build)")
	chart := flag.String("chart", "networking-cilium", "the Cilium chart to apply: Gardener's networking-cilium, or upstream's of a Cilium version such as 1.19.7")
	keep := flag.Bool("keep", os.Getenv("KEEP") == "1", "leave everything running and print a kubeconfig")
	flag.Parse()

	if err := run(*extension, *chart, *keep); err != nil {
		fmt.Fprintf(os.Stderr, "\nDEMO FAILED: %v\n", err)
		os.Exit(1)
	}
}

func step(format string, args ...any) { fmt.Printf("==> "+format+"\n", args...) }

type demo struct {
	env      *testenv.Env
	operator *ciliumoperator.Operator
	// sandbox stands for the nodes' network (nil without root).
	sandbox *podrun.Sandbox
}

func run(extension, chart string, keep bool) error {
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()

	certs, err := testenv.NewGardenerCertificates("shoot--local--demo", "shoot.example.com", net.ParseIP(podrun.ClusterIP))
	if err != nil {
		return err
	}
	step("Starting the control plane (kube-apiserver and etcd from %s) with Gardener's and Cilium's CRDs, serving a "+
		"certificate made as Gardener makes it for a self-hosted shoot (no node IP in it)", os.Getenv("KUBEBUILDER_ASSETS"))
	env, err := testenv.Start(testenv.Options{Certificates: certs})
	if err != nil {
		return err
	}
	defer env.Stop()
	d := &demo{env: env}

	step("Creating the self-hosted shoot: Cluster kube-system (exposure type cilium, L2, VIP %s), 3 control-plane and 2 worker Nodes", fixtures.ExposureVIP)
	if err := env.CreateSelfHostedShoot(ctx, fixtures.WithExposureConfig(fixtures.Shoot(true), fixtures.ExposureConfigL2)); err != nil {
		return err
	}
	if os.Getuid() == 0 {
		step("The nodes' network: a network namespace in which the control-plane InternalIPs %v and localhost:443 "+
			"forward to kube-apiserver, and the ClusterIP %s and the VIP %s lead nowhere", fixtures.ControlPlaneIPs, podrun.ClusterIP, fixtures.ExposureVIP)
		if d.sandbox, err = podrun.NewShootSandbox(ctx, env, "cilium-demo-"+strconv.Itoa(os.Getpid())); err != nil {
			return err
		}
		defer d.sandbox.Close()
	}
	if err := d.startExtension(ctx, extension); err != nil {
		return err
	}
	// The datapath part runs the extension as its chart's pods and then starts it here again: stop whichever runs.
	defer func() { d.env.Extension.Stop(context.Background()) }()
	giveBack, err := d.extensionFromImage(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = giveBack() }()

	var problems []string
	p, err := d.ciliumAgents(ctx, chart)
	if err != nil {
		return err
	}
	problems = append(problems, p...)

	step("Starting Cilium's operator for the exposure (LB-IPAM, L2 announcements, BGP control plane); until the datapath " +
		"part below, where real agents announce the VIP, cp-0's agent is played as the announcer (it takes the L2 lease)")
	if d.operator, err = ciliumoperator.Start(ctx, env, nil); err != nil {
		return err
	}
	defer d.operator.Stop(context.Background())
	announcing, stopAnnouncing := context.WithCancel(ctx)
	go ciliumfake.Announcer(announcing, env.Client, "cp-0")
	p, err = d.exposure(ctx)
	stopAnnouncing()
	if err != nil {
		return err
	}
	problems = append(problems, p...)

	step("The extension runs as a process again, for the datapath part to run it as its chart's pods on every control-plane node")
	if err := giveBack(); err != nil {
		return err
	}
	step("Cilium's datapath: real agents on nodes that are network namespaces on a bridge, with a client beside them")
	p, err = d.datapath(ctx, chart)
	if err != nil {
		return err
	}
	problems = append(problems, p...)

	fmt.Println()
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	step("Summary: every Cilium component reached kube-apiserver without Cilium and verified Gardener's certificate " +
		"(localhost on the control plane, the control-plane nodes under the server name elsewhere); kube-apiserver was exposed on a VIP assigned by Cilium's LB-IPAM, and deleting " +
		"the exposure left nothing behind; as root, real agents connected the same way, announced the VIP, served kube-apiserver through it and failed it over, " +
		"enforced a policy changed right after kube-apiserver's graceful restart within seconds (without the extension none reconnected), " +
		"and with FRR advertised it over BGP to a router that spreads new connections over every control-plane node")

	if keep {
		step("Still running. Explore with: export KUBECONFIG=%s; kubectl get ds,pods,cm,svc,endpointslices -n kube-system", env.Kubeconfig)
		step("Extension log: %s; operator log: %s. Press Ctrl-C to stop.", d.env.Extension.LogPath(), d.operator.LogPath())
		<-ctx.Done()
	}
	return nil
}

func (d *demo) startExtension(ctx context.Context, binary string) error {
	step("Starting the extension as the chart's ServiceAccount: %s", binary)
	if err := d.env.Extensions().Run(ctx, binary); err != nil {
		return err
	}
	step("   with its production flags: %s", strings.Join(d.env.Extensions().Command()[1:], " "))
	step("The extension registered MutatingWebhookConfiguration %s and wrote ConfigMap kube-system/%s",
		testenv.WebhookConfigName, apiserverendpoints.ConfigMapName)
	return nil
}

// ciliumAgents applies Cilium's chart, creates an agent pod per node, shows how each is configured to reach
// kube-apiserver, and runs their Cilium components to show where they really connect.
func (d *demo) ciliumAgents(ctx context.Context, chart string) ([]string, error) {
	c := d.env.Client
	var rendered *ciliumchart.Objects
	var err error
	if chart == "networking-cilium" {
		step("Rendering Gardener's networking-cilium chart (Cilium %s) as that extension does for a self-hosted shoot "+
			"without kube-proxy (k8sServiceHost=%s) and applying it", ciliumchart.GardenerVersion, ciliumchart.ExternalHost)
		rendered, err = ciliumchart.RenderGardener(ciliumchart.GardenerVersion, ciliumchart.GardenerValues(ciliumchart.GardenerVersion))
	} else {
		step("Rendering Cilium %s's chart (k8sServiceHost=%s, kubeProxyReplacement=true) and applying it", chart, ciliumchart.ExternalHost)
		rendered, err = ciliumchart.Render(chart, ciliumchart.Values(chart))
	}
	if err != nil {
		return nil, err
	}
	for _, obj := range rendered.All {
		if err := c.Create(ctx, obj.DeepCopyObject().(client.Object)); err != nil {
			return nil, fmt.Errorf("creating %T %s: %w", obj, obj.GetName(), err)
		}
	}

	step("Creating one agent pod per node, as the DaemonSet controller would")
	agent := &appsv1.DaemonSet{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(rendered.Agent), agent); err != nil {
		return nil, err
	}
	nodes := &corev1.NodeList{}
	if err := c.List(ctx, nodes); err != nil {
		return nil, err
	}
	endpoints := &corev1.ConfigMap{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: cilium.Namespace, Name: apiserverendpoints.ConfigMapName}, endpoints); err != nil {
		return nil, err
	}

	fmt.Println()
	table := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(table, "NODE\tROLE\tKUBERNETES_SERVICE_HOST:PORT\tCILIUM_K8S_API_SERVER_URLS\tRESOLVED BY HOSTALIASES TO\tFROM")
	var problems []string
	pods := map[string]*corev1.Pod{}
	for _, node := range nodes.Items {
		pod := ciliumchart.DaemonSetPod(agent, node.Name)
		if err := c.Create(ctx, pod); err != nil {
			return nil, err
		}
		pods[node.Name] = pod
		role := "worker"
		if apiserverendpoints.IsControlPlaneNode(&node) {
			role = "control-plane"
		}
		env, from := resolved(pod, endpoints)
		var aliases []string
		for _, a := range pod.Spec.HostAliases {
			if slices.Contains(a.Hostnames, apiserverendpoints.ServerName) {
				aliases = append(aliases, a.IP)
			}
		}
		fmt.Fprintf(table, "%s\t%s\t%s\t%s\t%s\t%s\n", node.Name, role, env[cilium.EnvServiceHost]+":"+env[cilium.EnvServicePort],
			env[cilium.EnvAPIServerURLs], strings.Join(aliases, ","), from)
		if env[cilium.EnvServiceHost] == "" || strings.Contains(fmt.Sprint(env), ciliumchart.ExternalHost) {
			problems = append(problems, fmt.Sprintf("the agent on %s does not avoid the external name: %v", node.Name, env))
		}
	}
	_ = table.Flush()

	config := &corev1.ConfigMap{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(rendered.Config), config); err != nil {
		return nil, err
	}
	fmt.Printf("\ncilium-config: %s rendered as %q, stored %q; enable-l2-announcements %q (the exposure needs it)\n\n",
		cilium.FlagAPIServerURLs, rendered.Config.Data[cilium.FlagAPIServerURLs], config.Data[cilium.FlagAPIServerURLs], config.Data["enable-l2-announcements"])
	if _, ok := config.Data[cilium.FlagAPIServerURLs]; ok {
		problems = append(problems, "cilium-config still names the external API server")
	}

	step("Running, for each node, the agent's config init container (cilium-dbg build-config) and the operator, " +
		"built from Cilium's module, exactly as kubelet would run the admitted pods")
	p, err := d.connections(ctx, rendered, pods)
	return append(problems, p...), err
}

// resolved is the API server environment of the agent container as the kubelet would resolve it, and where it comes
// from: literals set at admission, or the endpoints ConfigMap that the template references.
func resolved(pod *corev1.Pod, endpoints *corev1.ConfigMap) (map[string]string, string) {
	i := slices.IndexFunc(pod.Spec.Containers, func(c corev1.Container) bool { return c.Name == cilium.AgentContainerName })
	if i < 0 {
		return map[string]string{}, "no agent container"
	}
	env := pod.Spec.Containers[i].Env
	from := "pod env (set at admission)"
	if slices.ContainsFunc(env, func(e corev1.EnvVar) bool {
		return e.ValueFrom != nil && e.ValueFrom.ConfigMapKeyRef != nil && e.ValueFrom.ConfigMapKeyRef.Name == endpoints.Name
	}) {
		from = "ConfigMap " + endpoints.Name
	}
	return ciliumchart.ResolveEnv(env, map[string]map[string]string{endpoints.Name: endpoints.Data}), from
}

// exposure creates the SelfHostedShootExposure as gardenadm would, shows its VIP, objects and status, deletes it and
// shows what is left.
func (d *demo) exposure(ctx context.Context) ([]string, error) {
	c := d.env.Client
	exp := fixtures.Exposure("bare-metal", fixtures.Nodes())
	step("Creating SelfHostedShootExposure kube-system/%s (type cilium), as gardenadm init does", exp.Name)
	start := time.Now()
	if err := c.Create(ctx, exp); err != nil {
		return nil, err
	}
	if err := testenv.WaitUntilReady(ctx, c, exp, time.Minute); err != nil {
		return nil, fmt.Errorf("the exposure did not succeed: %w (last operation %+v, last error %+v)", err, exp.Status.LastOperation, exp.Status.LastError)
	}
	took := time.Since(start)

	var vips []string
	for _, in := range exp.Status.Ingress {
		vips = append(vips, in.IP)
	}
	fmt.Println()
	table := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(table, "EXPOSURE\tTYPE\tSTATUS.INGRESS\tLAST OPERATION\tCREATED -> SUCCEEDED")
	fmt.Fprintf(table, "%s\t%s\t%s\t%s %s\t%s\n", exp.Name, exp.Spec.Type, strings.Join(vips, ","), exp.Status.LastOperation.Type,
		exp.Status.LastOperation.State, took.Round(time.Millisecond))
	_ = table.Flush()
	events := &corev1.EventList{}
	if err := c.List(ctx, events, client.InNamespace(exp.Namespace)); err != nil {
		return nil, err
	}
	for _, e := range events.Items {
		if e.InvolvedObject.Name == exp.Name && e.Reason == "Announced" {
			fmt.Printf("event %s: %s\n", e.Reason, e.Message)
		}
	}
	fmt.Println()
	if err := d.printObjects(ctx, exp); err != nil {
		return nil, err
	}

	var problems []string
	if !slices.Equal(vips, []string{fixtures.ExposureVIP}) {
		problems = append(problems, fmt.Sprintf("status.ingress is %v, want the pinned VIP %s", vips, fixtures.ExposureVIP))
	}

	step("Deleting the exposure: the Service first (LB-IPAM releases the VIP), then everything else")
	if err := c.Delete(ctx, exp); err != nil {
		return nil, err
	}
	if err := d.env.WaitUntilGone(ctx, exp, time.Minute); err != nil {
		return nil, fmt.Errorf("the exposure was not deleted: %w", err)
	}
	left, err := d.env.Owned(ctx, exp.Namespace, exp.Name)
	if err != nil {
		return nil, err
	}
	fmt.Printf("\nleft after deletion: %s\n", describeCounts(left))
	if len(left) > 0 {
		problems = append(problems, fmt.Sprintf("deletion left %v", left))
	}
	return problems, nil
}

func (d *demo) printObjects(ctx context.Context, exp *extensionsv1alpha1.SelfHostedShootExposure) error {
	owned, err := d.env.Owned(ctx, exp.Namespace, exp.Name)
	if err != nil {
		return err
	}
	table := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(table, "OBJECTS OF THE EXPOSURE\tCOUNT")
	kinds := make([]string, 0, len(owned))
	for k := range owned {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		fmt.Fprintf(table, "%s\t%d\n", k, owned[k])
	}
	_ = table.Flush()
	fmt.Println()
	return nil
}

func describeCounts(counts map[string]int) string {
	if len(counts) == 0 {
		return "nothing"
	}
	return fmt.Sprint(counts)
}
