package apiserverendpoints

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	if got := cp.Host(); got != "10.0.0.9" {
		t.Errorf("Host() = %q, want 10.0.0.9", got)
	}
	data := cp.Data()
	if data[KeyServiceHost] != "10.0.0.9" || data[KeyAPIServerURLs] != "https://10.0.0.9:443,https://10.0.0.12:443,https://[fd00::12]:443" {
		t.Errorf("Data() = %v", data)
	}
}

func TestFromNodesIPv6Only(t *testing.T) {
	cp := FromNodes([]corev1.Node{node("cp", true, internal("fd00::1"))})
	if cp.Host() != "fd00::1" || !slices.Equal(cp.URLs(), []string{"https://[fd00::1]:443"}) {
		t.Errorf("got host %q urls %v", cp.Host(), cp.URLs())
	}
}

func TestFromNodesWithoutControlPlane(t *testing.T) {
	cp := FromNodes([]corev1.Node{node("worker", false, internal("10.0.0.1")), node("cp", true)})
	if !cp.Empty() || cp.Host() != "" || len(cp.URLs()) != 0 {
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
	if *cm.Name != ConfigMapName || *cm.Namespace != "kube-system" || cm.Labels[LabelManagedBy] != ManagedByValue {
		t.Errorf("unexpected metadata: %s/%s %v", *cm.Namespace, *cm.Name, cm.Labels)
	}
	if cm.Data[KeyServiceHost] != "10.0.0.1" || cm.Data[KeyAPIServerURLs] != "https://10.0.0.1:443" {
		t.Errorf("unexpected data: %v", cm.Data)
	}
}
