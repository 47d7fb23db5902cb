package datapath

import (
	"context"
	"io"
	"net"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/ciliumnodes"
)

// TestWorkloadPodsTalkAcrossNodes: pods made as kubelet and containerd make them (their Pod objects, network
// namespaces, Cilium's CNI plugin's ADD) on a control-plane node and a worker get addresses from their nodes' pod CIDRs
// and reach each other through Cilium's datapath.
func TestWorkloadPodsTalkAcrossNodes(t *testing.T) {
	onEachLane(t, func(t *testing.T, l *lane) {
		ctx := context.Background()
		var pods []*ciliumnodes.WorkloadPod
		for _, node := range []string{"cp-0", "worker-0"} {
			pod := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: "app-" + node, Labels: map[string]string{"app": "talk"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}}},
			}
			p, err := l.cluster.Node(node).StartPod(ctx, l.env, pod)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if err := p.Stop(context.Background(), l.env); err != nil {
					t.Error(err)
				}
			})
			t.Logf("pod %s on %s at %s", pod.Name, node, p.IP)
			pods = append(pods, p)
		}
		var listener net.Listener
		if err := pods[0].Netns().Do(func() error {
			var err error
			listener, err = net.Listen("tcp", net.JoinHostPort(pods[0].IP, "8080"))
			return err
		}); err != nil {
			t.Fatal(err)
		}
		defer listener.Close()
		go func() {
			for {
				c, err := listener.Accept()
				if err != nil {
					return
				}
				_, _ = io.WriteString(c, "hello")
				c.Close()
			}
		}()
		dialCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		conn, err := pods[1].Netns().DialContext(dialCtx, "tcp", net.JoinHostPort(pods[0].IP, "8080"))
		if err != nil {
			t.Fatalf("from %s to %s: %v", pods[1].Pod.Name, pods[0].Pod.Name, err)
		}
		defer conn.Close()
		got, err := io.ReadAll(conn)
		if err != nil || string(got) != "hello" {
			t.Errorf("from %s to %s: %q, %v", pods[1].Pod.Name, pods[0].Pod.Name, got, err)
		}
	})
}
