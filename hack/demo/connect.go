// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/apiserverendpoints"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/cilium"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/ciliumbin"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/ciliumchart"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/ciliumoperator"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/fixtures"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/podrun"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/testenv"
)

// componentRun is one Cilium container started from an admitted pod.
type componentRun struct {
	node, role, component string
	pod                   *corev1.Pod
	container             string
}

// connections starts, for every node, the agent's `config` init container (`cilium-dbg build-config`) of the pod
// the webhook admitted for it, and the operator's pod, with the real binaries in a sandbox that stands for the node's
// network (test/framework/podrun), and shows which kube-apiserver address each reached. A component that finishes or leads has
// verified kube-apiserver's certificate, which Gardener's secret utilities made: Cilium's client never skips
// verification.
func (d *demo) connections(ctx context.Context, rendered *ciliumchart.Objects, agentPods map[string]*corev1.Pod) ([]string, error) {
	if d.sandbox == nil {
		fmt.Printf("(skipped: %v)\n", testenv.Root())
		return nil, nil
	}
	sandbox := d.sandbox
	defer ciliumoperator.FreeLease(ctx, d.env.Client)

	var runs []componentRun
	for _, node := range slices.Sorted(maps.Keys(agentPods)) {
		role := "worker"
		if strings.HasPrefix(node, "cp-") {
			role = "control-plane"
		}
		runs = append(runs, componentRun{node, role, "agent (config: cilium-dbg build-config)", agentPods[node], "config"})
	}
	// A pod that the DaemonSet controller creates from the admitted template while the webhook is unreachable.
	agent := &appsv1.DaemonSet{}
	if err := d.env.Client.Get(ctx, client.ObjectKeyFromObject(rendered.Agent), agent); err != nil {
		return nil, err
	}
	unadmitted := ciliumchart.DaemonSetPod(agent, "worker-1")
	unadmitted.Name = "cilium-unadmitted"
	runs = append(runs, componentRun{"worker-1", "worker", "agent config, from the template alone (webhook down)", unadmitted, "config"})
	operator := ciliumchart.DeploymentPod(rendered.Operator)
	if err := d.env.Client.Create(ctx, operator); err != nil {
		return nil, err
	}
	runs = append(runs, componentRun{"worker-0", "worker", "operator (admitted unscheduled)", operator, "cilium-operator"})

	configMaps := map[string]map[string]string{}
	list := &corev1.ConfigMapList{}
	if err := d.env.Client.List(ctx, list, client.InNamespace(cilium.Namespace)); err != nil {
		return nil, err
	}
	for _, cm := range list.Items {
		configMaps[cm.Name] = cm.Data
	}
	// The operator's config directory also gets its serve addresses, and what it would otherwise create or wait for.
	configMaps[cilium.ConfigMapName] = maps.Clone(configMaps[cilium.ConfigMapName])
	maps.Copy(configMaps[cilium.ConfigMapName], ciliumoperator.Config(9234, 9963))

	fmt.Println()
	table := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(table, "NODE\tROLE\tCOMPONENT\tSERVER\t/etc/hosts FOR THE SERVER NAME\tREACHED\tRESULT")
	var problems []string
	for _, r := range runs {
		reached, result, err := d.start(ctx, sandbox, r, configMaps)
		if err != nil {
			return nil, err
		}
		var hosts []string
		for _, a := range r.pod.Spec.HostAliases {
			if slices.Contains(a.Hostnames, apiserverendpoints.ServerName) {
				hosts = append(hosts, a.IP)
			}
		}
		fmt.Fprintf(table, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.node, r.role, r.component, server(r, configMaps), strings.Join(hosts, ","), strings.Join(reached, ","), result)
		allowed := sandbox.ControlPlaneAddresses()
		if r.role == "control-plane" {
			allowed = []string{podrun.LocalAPIServer}
		}
		switch {
		case !strings.HasPrefix(result, "ok"):
			problems = append(problems, fmt.Sprintf("%s on %s: %s", r.component, r.node, result))
		case len(reached) == 0:
			problems = append(problems, fmt.Sprintf("%s on %s reached no kube-apiserver", r.component, r.node))
		}
		for _, addr := range reached {
			if !slices.Contains(allowed, addr) {
				problems = append(problems, fmt.Sprintf("%s on %s reached %s", r.component, r.node, addr))
			}
		}
	}
	_ = table.Flush()
	fmt.Printf("\n(%s is the control-plane node's own kube-apiserver; %s the ClusterIP and %s the VIP, which nobody may reach)\n\n",
		podrun.LocalAPIServer, podrun.ClusterIP+":443", fixtures.ExposureVIP+":443")
	return problems, nil
}

// start runs r until it has done its job (build-config wrote the agent's configuration; the operator leads) and
// returns the addresses it reached and the outcome.
func (d *demo) start(ctx context.Context, sandbox *podrun.Sandbox, r componentRun, configMaps map[string]map[string]string) ([]string, string, error) {
	ciliumoperator.FreeLease(ctx, d.env.Client)
	sandbox.Reset()
	c, err := podrun.ForPod(ctx, d.env, r.pod, r.container)
	if err != nil {
		return nil, "", err
	}
	if c.Dir, err = os.MkdirTemp(d.env.Dir, "pod-"); err != nil {
		return nil, "", err
	}
	c.Node, c.ConfigMaps, c.LogPath = r.node, configMaps, filepath.Join(d.env.Dir, "pods", r.node+"-"+r.container+".log")
	started, err := sandbox.Start(c)
	if err != nil {
		return nil, "", err
	}
	defer started.Stop(context.Background())

	result := "ok: certificate verified, "
	// cilium-dbg build-config finishes once it has written the configuration; the operator runs on.
	if strings.HasPrefix(filepath.Base(c.Binary), ciliumbin.Dbg) {
		select {
		case <-started.Stopped():
			if started.Err() != nil {
				return nil, fmt.Sprintf("failed (%v), log %s", started.Err(), started.LogPath()), nil
			}
			result += "configuration written"
		case <-time.After(time.Minute):
			return nil, "did not finish within a minute, log " + started.LogPath(), nil
		}
	} else {
		if err := ciliumoperator.WaitUntilLeading(ctx, d.env.Client, started.Process); err != nil {
			return nil, fmt.Sprintf("did not lead: %v, log %s", err, started.LogPath()), nil
		}
		result += "leading"
	}
	return slices.Sorted(maps.Keys(sandbox.Reached())), result, nil
}

// server is where the container's environment points Cilium: a kubeconfig's server and TLS server name (with several
// URLs, Cilium's round tripper sends each request to the current one of them instead: pkg/k8s/client
// rest_config_provider.go createConfig), the one URL, or KUBERNETES_SERVICE_HOST.
func server(r componentRun, configMaps map[string]map[string]string) string {
	containers := slices.Concat(r.pod.Spec.InitContainers, r.pod.Spec.Containers)
	c := containers[slices.IndexFunc(containers, func(c corev1.Container) bool { return c.Name == r.container })]
	env := ciliumchart.ResolveEnv(c.Env, configMaps)
	if env[cilium.EnvKubeconfigPath] != "" {
		kubeconfig, err := clientcmd.Load([]byte(configMaps[apiserverendpoints.ConfigMapName][apiserverendpoints.KeyKubeconfig]))
		if err != nil {
			return "kubeconfig: " + err.Error()
		}
		for _, cluster := range kubeconfig.Clusters {
			if urls := env[cilium.EnvAPIServerURLs]; strings.Contains(urls, ",") {
				return "kubeconfig (TLS name " + cluster.TLSServerName + "), rotating over " + urls
			}
			return "kubeconfig: " + cluster.Server + " as " + cluster.TLSServerName
		}
	}
	if urls := env[cilium.EnvAPIServerURLs]; urls != "" {
		return urls
	}
	return env[cilium.EnvServiceHost] + ":" + env[cilium.EnvServicePort]
}
