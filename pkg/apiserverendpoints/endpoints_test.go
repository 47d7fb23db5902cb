package apiserverendpoints

import (
	"slices"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

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
	data, err := cp.Data()
	if err != nil {
		t.Fatal(err)
	}
	if data[KeyAPIServerURLs] != "https://10.0.0.9:443,https://10.0.0.12:443,https://[fd00::12]:443" ||
		data[KeyKubeconfigPath] != "/var/lib/cilium-selfhosted-apiserver/kubeconfig" {
		t.Errorf("Data() = %v", data)
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

func TestKubeconfig(t *testing.T) {
	kubeconfig, err := FromNodes([]corev1.Node{node("cp-1", true, internal("10.0.0.2")), node("cp-0", true, internal("10.0.0.1"))}).Kubeconfig()
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.Load([]byte(kubeconfig))
	if err != nil {
		t.Fatal(err)
	}
	cluster, auth := cfg.Clusters[cfg.Contexts[cfg.CurrentContext].Cluster], cfg.AuthInfos[cfg.Contexts[cfg.CurrentContext].AuthInfo]
	if cluster.Server != "https://10.0.0.1:443" || cluster.TLSServerName != "kube-apiserver.kube-system.svc.cluster.local" ||
		cluster.CertificateAuthority != "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt" || cluster.InsecureSkipTLSVerify {
		t.Errorf("cluster = %+v", cluster)
	}
	if auth.TokenFile != "/var/run/secrets/kubernetes.io/serviceaccount/token" || auth.Token != "" {
		t.Errorf("user = %+v", auth)
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
	cm, err := ConfigMap(FromNodes([]corev1.Node{node("cp", true, internal("10.0.0.1"))}))
	if err != nil {
		t.Fatal(err)
	}
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
	kubeconfig, err := cp.Kubeconfig()
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.Load([]byte(kubeconfig))
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
