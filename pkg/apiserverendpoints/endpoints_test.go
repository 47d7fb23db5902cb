// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package apiserverendpoints

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdlatest "k8s.io/client-go/tools/clientcmd/api/latest"
	clientcmdv1 "k8s.io/client-go/tools/clientcmd/api/v1"

	kubernetesutils "github.com/gardener/gardener/pkg/utils/kubernetes"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/identity"
)

func node(name string, controlPlane bool, addrs ...corev1.NodeAddress) corev1.Node {
	n := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}}}
	if controlPlane {
		n.Labels["node-role.kubernetes.io/control-plane"] = ""
	}
	n.Status.Addresses = addrs
	return n
}

func internal(ip string) corev1.NodeAddress {
	return corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip}
}

func TestFromNodes(t *testing.T) {
	nodes := []corev1.Node{
		node("cp-2", true, internal("10.0.0.12"), internal("fd00::12"), corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: "203.0.113.12"}),
		node("worker", false, internal("10.0.0.21")),
		node("cp-1", true, internal("10.0.0.9"), corev1.NodeAddress{Type: corev1.NodeHostName, Address: "cp-1"}),
		node("cp-3", true, internal("10.0.0.12"), internal("not-an-ip")), // duplicate and garbage
	}
	cp := FromNodes(nodes)

	wantURLs := []string{"https://10.0.0.9:443", "https://10.0.0.12:443", "https://[fd00::12]:443"}
	if got := cp.URLs(); !slices.Equal(got, wantURLs) {
		t.Errorf("URLs() = %v, want %v", got, wantURLs)
	}
	if data := cp.Data(); data[KeyAPIServerURLs] != "https://10.0.0.9:443,https://10.0.0.12:443,https://[fd00::12]:443" ||
		data[KeyKubeconfigPath] != "/var/lib/cilium-selfhosted-apiserver/kubeconfig" {
		t.Errorf("Data() = %v", cp.Data())
	}
}

// TestJoiningControlPlaneNode: kubelet registers a control-plane node with the taint, gardener-node-agent labels it
// later. From the taint on it is a control-plane node (its own Cilium pods reach their own kube-apiserver), but a member
// that other nodes' Cilium may use only with the label, which a kubelet cannot give itself; the taint it can.
func TestJoiningControlPlaneNode(t *testing.T) {
	joining := node("cp-new", false, internal("10.0.0.30"))
	joining.Spec.Taints = []corev1.Taint{{Key: "node-role.kubernetes.io/control-plane", Effect: corev1.TaintEffectNoSchedule}}
	if !IsControlPlaneNode(&joining) {
		t.Error("a node with the control-plane taint and no label yet is not taken for a control-plane node")
	}
	other := node("worker", false, internal("10.0.0.31"))
	other.Spec.Taints = []corev1.Taint{{Key: "node.kubernetes.io/not-ready", Effect: corev1.TaintEffectNoSchedule}}
	if IsControlPlaneNode(&other) {
		t.Error("a worker is taken for a control-plane node")
	}
	if IsMember(&joining) || !FromNodes([]corev1.Node{joining, other}).Empty() {
		t.Errorf("a node with only the control-plane taint is a member: %v", FromNodes([]corev1.Node{joining, other}).URLs())
	}
	joining.Labels["node-role.kubernetes.io/control-plane"] = ""
	if got := FromNodes([]corev1.Node{joining, other}).URLs(); !slices.Equal(got, []string{"https://10.0.0.30:443"}) {
		t.Errorf("URLs() = %v once labelled", got)
	}
}

// TestKubeconfig: the kubeconfig from the fixed text is, for clientcmd, exactly the one Gardener's kubeconfig helper
// builds from the same parts (nothing more: no exec, no skipped verification), for an IPv4 and an IPv6 first server.
func TestKubeconfig(t *testing.T) {
	for _, server := range []string{"10.0.0.1", "fd00::1"} {
		kubeconfig := FromNodes([]corev1.Node{node("cp-0", true, internal(server))}).Kubeconfig()
		got, err := clientcmd.Load([]byte(kubeconfig))
		if err != nil {
			t.Fatal(err)
		}
		built, err := runtime.Encode(clientcmdlatest.Codec, kubernetesutils.NewKubeconfig("kube-apiserver",
			clientcmdv1.Cluster{Server: URL(server), TLSServerName: ServerName, CertificateAuthority: ServiceAccountDir + "/ca.crt"},
			clientcmdv1.AuthInfo{TokenFile: ServiceAccountDir + "/token"}))
		if err != nil {
			t.Fatal(err)
		}
		want, err := clientcmd.Load(built)
		if err != nil {
			t.Fatal(err)
		}
		if !apiequality.Semantic.DeepEqual(got, want) {
			t.Errorf("kubeconfig for %s:\n%s\nloads otherwise than\n%s", server, kubeconfig, built)
		}
		cluster := got.Clusters[got.Contexts[got.CurrentContext].Cluster]
		if cluster.Server != URL(server) || cluster.TLSServerName != "kube-apiserver.kube-system.svc.cluster.local" || cluster.InsecureSkipTLSVerify {
			t.Errorf("cluster = %+v", cluster)
		}
	}
	if strings.ContainsAny(KubeconfigPrefix+KubeconfigSuffix, `'"\`) {
		t.Error("the kubeconfig's text holds a quote or a backslash: the chart's policy cannot carry it as a CEL raw string")
	}
}

// TestFromNodesLeavesOutUnreachableAddresses: a control-plane node reporting a loopback, link-local, unspecified,
// multicast or zoned InternalIP (written by whoever may write its status) contributes only its reachable address.
func TestFromNodesLeavesOutUnreachableAddresses(t *testing.T) {
	cp := FromNodes([]corev1.Node{node("cp", true,
		internal("127.0.0.1"), internal("::1"), internal("169.254.10.1"), internal("fe80::1"), internal("fe80::1%eth0"),
		internal("0.0.0.0"), internal("224.0.0.1"), internal("ff02::1"), internal("10.0.0.5"))})
	if want := []string{"https://10.0.0.5:443"}; !slices.Equal(cp.URLs(), want) {
		t.Errorf("URLs() = %v, want %v", cp.URLs(), want)
	}
}

func TestFromNodesIPv6Only(t *testing.T) {
	cp := FromNodes([]corev1.Node{node("cp", true, internal("fd00::1"))})
	if !slices.Equal(cp.URLs(), []string{"https://[fd00::1]:443"}) {
		t.Errorf("got urls %v", cp.URLs())
	}
}

func TestFromNodesWithoutControlPlane(t *testing.T) {
	cp := FromNodes([]corev1.Node{node("worker", false, internal("10.0.0.1")), node("cp", true)})
	if !cp.Empty() || len(cp.URLs()) != 0 || cp.HostAliases("x") != nil {
		t.Errorf("want no endpoints, got %+v", cp)
	}
}

func TestLocalURL(t *testing.T) {
	if LocalURL != "https://localhost:443" {
		t.Errorf("LocalURL = %q", LocalURL)
	}
}

func TestConfigMap(t *testing.T) {
	cm := ConfigMap(FromNodes([]corev1.Node{node("cp", true, internal("10.0.0.1"))}))
	if *cm.Name != ConfigMapName || *cm.Namespace != "kube-system" || cm.Labels[identity.LabelManagedBy] != identity.Name {
		t.Errorf("unexpected metadata: %s/%s %v", *cm.Namespace, *cm.Name, cm.Labels)
	}
	if cm.Data[KeyAPIServerURLs] != "https://10.0.0.1:443" || cm.Data[KeyKubeconfig] == "" {
		t.Errorf("unexpected data: %v", cm.Data)
	}
}

func withReady(n corev1.Node, status corev1.ConditionStatus) corev1.Node {
	n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: corev1.NodeReady, Status: status})
	return n
}

// TestReadyNodesFirst: the addresses of Ready control-plane nodes come first in the list, the kubeconfig's server and
// every pod's aliases; a node that is down, partitioned (Unknown) or still joining (no condition yet) comes after them.
func TestReadyNodesFirst(t *testing.T) {
	cp := FromNodes([]corev1.Node{
		withReady(node("cp-0", true, internal("10.0.0.1")), corev1.ConditionFalse),
		withReady(node("cp-1", true, internal("10.0.0.2")), corev1.ConditionTrue),
		withReady(node("cp-2", true, internal("10.0.0.3"), internal("fd00::3")), corev1.ConditionTrue),
		node("cp-3", true, internal("10.0.0.4")),
		withReady(node("cp-4", true, internal("10.0.0.0")), corev1.ConditionUnknown),
		// The address of a node replaced at it, while the old Node object is still there.
		withReady(node("cp-5", true, internal("10.0.0.2")), corev1.ConditionUnknown),
	})
	want := []string{"https://10.0.0.2:443", "https://10.0.0.3:443", "https://[fd00::3]:443", "https://10.0.0.0:443", "https://10.0.0.1:443", "https://10.0.0.4:443"}
	if got := cp.URLs(); !slices.Equal(got, want) || cp.Ready != 3 {
		t.Fatalf("URLs() = %v with %d ready, want %v with 3", got, cp.Ready, want)
	}
	cfg, err := clientcmd.Load([]byte(cp.Kubeconfig()))
	if err != nil {
		t.Fatal(err)
	}
	if server := cfg.Clusters[cfg.Contexts[cfg.CurrentContext].Cluster].Server; server != "https://10.0.0.2:443" {
		t.Errorf("the kubeconfig's server is %s, not the first Ready node's", server)
	}
	ready := []string{"10.0.0.2", "10.0.0.3", "fd00::3"}
	firsts := map[string]bool{}
	for i := range 50 {
		aliases := cp.HostAliases("worker-" + strconv.Itoa(i))
		var ips []string
		for _, a := range aliases {
			ips = append(ips, a.IP)
		}
		if len(ips) != 6 || !sameSet(ips[:3], ready) || !sameSet(ips[3:], []string{"10.0.0.0", "10.0.0.1", "10.0.0.4"}) {
			t.Fatalf("aliases %v: not the Ready nodes first and every address once", ips)
		}
		firsts[ips[0]] = true
	}
	if len(firsts) != len(ready) {
		t.Errorf("the pods start at %v only, not spread over every Ready address", firsts)
	}
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}
