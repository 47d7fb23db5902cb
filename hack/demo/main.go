// Command demo shows the extension at work on a self-hosted shoot in an embedded control plane: kube-apiserver and
// etcd built from source, Gardener's CRDs, a self-hosted Cluster with 3 control-plane and 2 worker Nodes, the
// extension binary started with its production flags, and Cilium's real chart applied with one agent pod per node,
// created the way the DaemonSet controller would. It prints how each Cilium pod reaches kube-apiserver.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/apiserverendpoints"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/cilium"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/ciliumchart"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/fixtures"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/testenv"
	"github.com/gardener/gardener-extension-cilium-selfhosted/webhook/apiserveraccess"
)

func main() {
	extension := flag.String("extension", "bin/gardener-extension-cilium-selfhosted", "the extension binary (make build)")
	version := flag.String("cilium-version", "1.19.7", "the Cilium chart to apply")
	keep := flag.Bool("keep", os.Getenv("KEEP") == "1", "leave everything running and print a kubeconfig")
	flag.Parse()

	if err := run(*extension, *version, *keep); err != nil {
		fmt.Fprintf(os.Stderr, "\nDEMO FAILED: %v\n", err)
		os.Exit(1)
	}
}

func step(format string, args ...any) { fmt.Printf("==> "+format+"\n", args...) }

func run(extension, version string, keep bool) error {
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()

	step("Starting the control plane (kube-apiserver and etcd from %s)", os.Getenv("KUBEBUILDER_ASSETS"))
	env, err := testenv.Start()
	if err != nil {
		return err
	}
	defer env.Stop()

	step("Creating the self-hosted shoot: Cluster kube-system, 3 control-plane and 2 worker Nodes")
	if err := env.CreateSelfHostedShoot(ctx, fixtures.Shoot(true)); err != nil {
		return err
	}

	port, err := testenv.FreePort()
	if err != nil {
		return err
	}
	kubeconfig, err := env.ApplyChartRBAC(ctx)
	if err != nil {
		return err
	}
	args := env.ExtensionFlags(kubeconfig, testenv.ExtensionNamespace, port)
	step("Starting the extension: %s %s", extension, strings.Join(args, " "))
	ext, err := env.StartExtension(extension, args)
	if err != nil {
		return err
	}
	defer ext.Stop(context.Background())

	if err := env.WaitForExtension(ctx, len(apiserveraccess.WebhookNames), ext); err != nil {
		return fmt.Errorf("%w\n--- extension log ---\n%s", err, ext.Log())
	}
	step("The extension registered MutatingWebhookConfiguration %s and wrote ConfigMap kube-system/%s",
		testenv.WebhookConfigName, apiserverendpoints.ConfigMapName)

	step("Rendering Cilium %s's chart (k8sServiceHost=%s, kubeProxyReplacement=true) and applying it", version, ciliumchart.ExternalHost)
	rendered, err := ciliumchart.Render(version, ciliumchart.Values(version))
	if err != nil {
		return err
	}
	for _, obj := range rendered.All {
		if err := env.Client.Create(ctx, obj.DeepCopyObject().(client.Object)); err != nil {
			return fmt.Errorf("creating %T %s: %w", obj, obj.GetName(), err)
		}
	}

	step("Creating one agent pod per node, as the DaemonSet controller would")
	agent := &appsv1.DaemonSet{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(rendered.Agent), agent); err != nil {
		return err
	}
	nodes := &corev1.NodeList{}
	if err := env.Client.List(ctx, nodes); err != nil {
		return err
	}
	endpoints := &corev1.ConfigMap{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: cilium.Namespace, Name: apiserverendpoints.ConfigMapName}, endpoints); err != nil {
		return err
	}

	fmt.Println()
	table := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(table, "NODE\tROLE\tKUBERNETES_SERVICE_HOST:PORT\tCILIUM_K8S_API_SERVER_URLS\tFROM")
	var problems []string
	for _, node := range nodes.Items {
		pod := ciliumchart.DaemonSetPod(agent, node.Name)
		if err := env.Client.Create(ctx, pod); err != nil {
			return err
		}
		role := "worker"
		if apiserverendpoints.IsControlPlaneNode(&node) {
			role = "control-plane"
		}
		env, from := resolved(pod, endpoints)
		fmt.Fprintf(table, "%s\t%s\t%s\t%s\t%s\n", node.Name, role, env[cilium.EnvServiceHost]+":"+env[cilium.EnvServicePort], env[cilium.EnvAPIServerURLs], from)
		if env[cilium.EnvServiceHost] == "" || strings.Contains(fmt.Sprint(env), ciliumchart.ExternalHost) {
			problems = append(problems, fmt.Sprintf("the agent on %s does not avoid the external name: %v", node.Name, env))
		}
	}
	_ = table.Flush()

	config := &corev1.ConfigMap{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(rendered.Config), config); err != nil {
		return err
	}
	fmt.Printf("\ncilium-config: %s rendered as %q, stored: %q\n", cilium.FlagAPIServerURLs,
		rendered.Config.Data[cilium.FlagAPIServerURLs], config.Data[cilium.FlagAPIServerURLs])
	if _, ok := config.Data[cilium.FlagAPIServerURLs]; ok {
		problems = append(problems, "cilium-config still names the external API server")
	}

	fmt.Println()
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	step("Summary: every Cilium agent reaches kube-apiserver without Cilium: localhost on the control plane, the control-plane IPs elsewhere")

	if keep {
		step("Still running. Explore with: KUBECONFIG=%s kubectl get ds,pods,cm -n kube-system", env.Kubeconfig)
		step("Extension log: %s. Press Ctrl-C to stop.", ext.LogPath())
		<-ctx.Done()
	}
	return nil
}

// resolved is the API server environment of the agent container as the kubelet would resolve it, and where the host
// comes from: a literal set at admission, or the endpoints ConfigMap that the template references.
func resolved(pod *corev1.Pod, endpoints *corev1.ConfigMap) (map[string]string, string) {
	out, from := map[string]string{}, "pod env (set at admission)"
	i := slices.IndexFunc(pod.Spec.Containers, func(c corev1.Container) bool { return c.Name == cilium.AgentContainerName })
	if i < 0 {
		return out, "no agent container"
	}
	for _, e := range pod.Spec.Containers[i].Env {
		switch {
		case e.ValueFrom == nil:
			out[e.Name] = e.Value
		case e.ValueFrom.ConfigMapKeyRef != nil && e.ValueFrom.ConfigMapKeyRef.Name == endpoints.Name:
			out[e.Name] = endpoints.Data[e.ValueFrom.ConfigMapKeyRef.Key]
			from = "ConfigMap " + endpoints.Name
		}
	}
	return out, from
}
