// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package repin_test

import (
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/apiserverendpoints"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/cilium"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/controller/repin"
)

// agent is an agent pod on node as the webhook pins it: KUBERNETES_SERVICE_HOST host and, off the control plane, the
// server name aliased to aliases in order.
func agent(name, node, host string, aliases ...string) *corev1.Pod {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: cilium.Namespace, Name: name, Labels: map[string]string{cilium.LabelKeyApp: cilium.LabelValueAgent}},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: cilium.AgentContainerName}}},
	}
	if host != "" {
		pod.Spec.Containers[0].Env = []corev1.EnvVar{{Name: cilium.EnvServiceHost, Value: host}}
	}
	for _, a := range aliases {
		pod.Spec.HostAliases = append(pod.Spec.HostAliases, corev1.HostAlias{IP: a, Hostnames: []string{apiserverendpoints.ServerName}})
	}
	return pod
}

func members(addrs ...string) apiserverendpoints.ControlPlane {
	cp := apiserverendpoints.ControlPlane{}
	for _, a := range addrs {
		cp.Addresses = append(cp.Addresses, netip.MustParseAddr(a))
	}
	cp.Ready = len(cp.Addresses)
	return cp
}

func TestClassify(t *testing.T) {
	cp := members("10.0.1.10", "10.0.1.11")
	cpNodes := sets.New("cp-0", "cp-1")
	for name, tc := range map[string]struct {
		pod  *corev1.Pod
		want repin.Pinning
	}{
		"worker, first alias a member":           {agent("a", "w-0", apiserverendpoints.ServerName, "10.0.1.11", "10.0.1.10"), repin.Current},
		"worker, first alias gone":               {agent("a", "w-0", apiserverendpoints.ServerName, "10.0.1.99", "10.0.1.10"), repin.Degraded},
		"worker, every alias gone":               {agent("a", "w-0", apiserverendpoints.ServerName, "10.0.1.98", "10.0.1.99"), repin.Stranded},
		"worker, no alias":                       {agent("a", "w-0", apiserverendpoints.ServerName), repin.Stranded},
		"control-plane node, localhost":          {agent("a", "cp-0", apiserverendpoints.LocalHost), repin.Current},
		"control-plane node, pinned as a worker": {agent("a", "cp-0", apiserverendpoints.ServerName, "10.0.1.11", "10.0.1.10"), repin.Misplaced},
		"control-plane node, every alias gone":   {agent("a", "cp-0", apiserverendpoints.ServerName, "10.0.1.99"), repin.Stranded},
		"localhost on a node no longer in it":    {agent("a", "w-0", apiserverendpoints.LocalHost), repin.Stranded},
		"admitted without the webhook":           {agent("a", "w-0", ""), repin.Unpinned},
		"an IPv4-mapped alias of a member":       {agent("a", "w-0", apiserverendpoints.ServerName, "::ffff:10.0.1.10"), repin.Current},
	} {
		t.Run(name, func(t *testing.T) {
			if got := repin.Classify(tc.pod, cp, cpNodes); got != tc.want {
				t.Errorf("%s, want %s", got, tc.want)
			}
		})
	}
}
