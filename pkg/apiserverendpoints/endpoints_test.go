package apiserverendpoints

import (
	"slices"
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
// later; from the taint on it is a control-plane node.
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
	if got := FromNodes([]corev1.Node{joining, other}).URLs(); !slices.Equal(got, []string{"https://10.0.0.30:443"}) {
		t.Errorf("URLs() = %v", got)
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
