// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package podrun

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/testenv"
)

// ForExtension is the extension's own container as kubelet would start the pod of its chart's DaemonSet (as
// Gardener's resource manager applied it into env) on node, a hostNetwork pod whose status.podIP is the node's
// InternalIP podIP: the binary env runs, a token of the chart's ServiceAccount, and the cluster CA of Gardener's
// certificates. Where Kubernetes' DaemonSet controller stored the node's pod, that pod runs, and its token is bound to
// it and names its node, as kubelet's projected token does; elsewhere (no controller runs) a pod made from the
// template, with a token bound to nothing. The caller adds the directories.
func ForExtension(ctx context.Context, env *testenv.Env, node, podIP string) (Container, error) {
	daemonSet := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: testenv.ExtensionNamespace, Name: testenv.ServiceAccountName}}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(daemonSet), daemonSet); err != nil {
		return Container{}, fmt.Errorf("the chart's DaemonSet as the resource manager applied it: %w", err)
	}
	pod, err := StoredExtensionPod(ctx, env, daemonSet, node)
	if err != nil {
		return Container{}, err
	}
	if pod == nil {
		pod = &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: daemonSet.Namespace, Name: daemonSet.Name + "-" + node, Labels: daemonSet.Spec.Template.Labels},
			Spec:       *daemonSet.Spec.Template.Spec.DeepCopy(),
		}
		pod.Spec.NodeName = node
	}
	token, err := Token(ctx, env.Config, pod)
	if err != nil {
		return Container{}, err
	}
	if env.Certificates == nil {
		return Container{}, fmt.Errorf("kube-apiserver serves no Gardener certificates (ShootCertificates)")
	}
	return Container{
		Pod: pod, Name: pod.Spec.Containers[0].Name, Node: node, PodIP: podIP,
		Binary: env.Extensions().Command()[0], Token: token, CA: env.Certificates.CA.CertificatePEM,
	}, nil
}

// ReadinessProbe is kubelet's readiness probe of the container c, started in s: ready when it answers 200.
func (s *Sandbox) ReadinessProbe(c Container, started *Started) func(context.Context) (bool, error) {
	container := c.Pod.Spec.Containers[0]
	for _, ct := range c.Pod.Spec.Containers {
		if ct.Name == c.Name {
			container = ct
		}
	}
	probe := container.ReadinessProbe.HTTPGet
	url := "http://" + net.JoinHostPort(c.PodIP, strconv.Itoa(probe.Port.IntValue())) + probe.Path
	hc := &http.Client{Timeout: time.Second, Transport: &http.Transport{DialContext: s.DialContext}}
	return testenv.Probe(started.Process, hc, url)
}

// TakeOver runs the extension as its chart's pod on node (InternalIP podIP) in s and hands it the controllers and the
// webhooks: env's extension, on this machine's network where the sandbox's addresses do not exist, stops and releases
// its lease, kube-apiserver's calls to the webhook URL the chart names go to the pod's webhook server on the sandbox's
// loopback (kube-apiserver standing for the node's own, which calls it there), and the pod, once ready, leads.
// giveBack stops the pod and the route and starts env's extension again.
func (s *Sandbox) TakeOver(ctx context.Context, env *testenv.Env, node, podIP, dir, logPath string) (pod *Started, giveBack func() error, err error) {
	c, err := ForExtension(ctx, env, node, podIP)
	if err != nil {
		return nil, nil, err
	}
	c.Dir, c.LogPath = dir, logPath
	webhookPort, err := WebhookServerPort(&c.Pod.Spec)
	if err != nil {
		return nil, nil, err
	}
	route := NewRoute(env.Extensions().WebhookAddress(), s.ns, net.JoinHostPort("127.0.0.1", webhookPort))
	env.Extensions().Stop(ctx, false)
	if err := route.Start(); err != nil {
		return nil, nil, errors.Join(fmt.Errorf("the route to the pod's webhook server: %w", err), env.Extensions().StartAgain())
	}
	started, err := s.Start(c)
	if err != nil {
		route.Stop()
		return nil, nil, errors.Join(err, env.Extensions().StartAgain())
	}
	giveBack = func() error {
		started.Stop(context.Background())
		route.Stop()
		return env.Extensions().StartAgain()
	}
	if err := testenv.WaitFor(ctx, time.Minute, s.ReadinessProbe(c, started)); err != nil {
		return nil, nil, errors.Join(fmt.Errorf("the extension pod is not ready: %w\n%s", err, started.LogTail(40)), giveBack())
	}
	return started, giveBack, nil
}

// WebhookServerPort is the port of the extension's pod spec on which it serves its webhooks on the node's loopback:
// its chart's container port webhook-server.
func WebhookServerPort(spec *corev1.PodSpec) (string, error) {
	for _, p := range spec.Containers[0].Ports {
		if p.Name == "webhook-server" {
			return strconv.Itoa(int(p.ContainerPort)), nil
		}
	}
	return "", fmt.Errorf("the extension's pod names no webhook-server port")
}

// StoredExtensionPod is the pod of the extension's daemonSet bound to node that is not being deleted, nil when there
// is none.
func StoredExtensionPod(ctx context.Context, env *testenv.Env, daemonSet *appsv1.DaemonSet, node string) (*corev1.Pod, error) {
	pods := &corev1.PodList{}
	if err := env.Client.List(ctx, pods, client.InNamespace(daemonSet.Namespace), client.MatchingLabels(daemonSet.Spec.Selector.MatchLabels)); err != nil {
		return nil, err
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if owner := metav1.GetControllerOf(p); owner != nil && owner.UID == daemonSet.UID && p.Spec.NodeName == node && p.DeletionTimestamp == nil {
			return p, nil
		}
	}
	return nil, nil
}
