package connect

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/apiserverendpoints"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/cilium"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/ciliumchart"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/ciliumoperator"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/testenv"
)

// version is the Cilium release of the operator binary (hack/cilium-operator) and of the chart it runs from.
const version = "1.19.7"

func urlHost(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", err
	}
	return u.Host, nil
}

var (
	installOnce sync.Once
	installed   *appsv1.Deployment
	installErr  error
)

// installCilium creates the chart's objects through kube-apiserver, so that the webhook admits them, the operator's
// ServiceAccount with cluster-admin (what is tested is how it connects, not its RBAC), and waits until the endpoints
// ConfigMap lists the control-plane nodes. It returns the stored operator Deployment.
func installCilium(t *testing.T) *appsv1.Deployment {
	t.Helper()
	installOnce.Do(func() {
		ctx := context.Background()
		rendered, err := ciliumchart.Render(version, ciliumchart.Values(version))
		if err != nil {
			installErr = err
			return
		}
		if installErr = testenv.WaitFor(ctx, time.Minute, func(ctx context.Context) (bool, error) {
			probe := rendered.Operator.DeepCopy()
			probe.Name = "probe"
			if err := env.Client.Create(ctx, probe, client.DryRunAll); err != nil {
				return false, err
			}
			return slices.ContainsFunc(probe.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == apiserverendpoints.VolumeName }), nil
		}); installErr != nil {
			return
		}
		for _, obj := range rendered.All {
			if err := env.Client.Create(ctx, obj.DeepCopyObject().(client.Object)); err != nil && !apierrors.IsAlreadyExists(err) {
				installErr = fmt.Errorf("creating %T %s: %w", obj, obj.GetName(), err)
				return
			}
		}
		binding := &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "cilium-operator-connect"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: cilium.Namespace, Name: "cilium-operator"}},
		}
		if installErr = env.Client.Create(ctx, binding); installErr != nil {
			return
		}
		want := make([]string, 0, len(controlPlaneIPs))
		for _, ip := range controlPlaneIPs {
			want = append(want, apiserverendpoints.URL(ip))
		}
		if installErr = testenv.WaitFor(ctx, 30*time.Second, func(ctx context.Context) (bool, error) {
			cm := &corev1.ConfigMap{}
			if err := env.Client.Get(ctx, client.ObjectKey{Namespace: cilium.Namespace, Name: apiserverendpoints.ConfigMapName}, cm); err != nil {
				return false, err
			}
			return cm.Data[apiserverendpoints.KeyAPIServerURLs] == strings.Join(want, ","), nil
		}); installErr != nil {
			return
		}
		installed = &appsv1.Deployment{}
		installErr = env.Client.Get(ctx, client.ObjectKeyFromObject(rendered.Operator), installed)
	})
	if installErr != nil {
		t.Fatal(installErr)
	}
	return installed
}

// admitted creates pod through kube-apiserver, so that the webhook admits it, and returns it as stored.
func admitted(t *testing.T, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	if err := env.Client.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), pod) })
	return pod
}

// run starts the operator container of pod as kubelet would on node, in the namespace, and stops it when the test
// ends.
func run(t *testing.T, pod *corev1.Pod, node string, overrideEnv map[string]string) *testenv.Process {
	t.Helper()
	ctx := context.Background()
	_ = env.Client.Delete(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: cilium.Namespace, Name: "cilium-operator-resource-lock"}})
	for _, ep := range endpoints {
		ep.reset()
	}

	dir := t.TempDir()
	container := pod.Spec.Containers[slices.IndexFunc(pod.Spec.Containers, func(c corev1.Container) bool { return c.Name == "cilium-operator" })]
	configMaps := readConfigMaps(t)

	// The service-account volume: a token of the pod's ServiceAccount, and the cluster CA.
	saDir := filepath.Join(dir, "serviceaccount")
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	token, err := cs.CoreV1().ServiceAccounts(cilium.Namespace).CreateToken(ctx, pod.Spec.ServiceAccountName,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: new(int64(3600))}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	writeFiles(t, saDir, map[string]string{
		corev1.ServiceAccountTokenKey:     token.Status.Token,
		corev1.ServiceAccountRootCAKey:    string(testenv.GardenerCertificates.CA.CertificatePEM),
		corev1.ServiceAccountNamespaceKey: cilium.Namespace,
	})

	// ConfigMap volumes: cilium-config as the config directory (with the serve addresses and what the operator would
	// otherwise wait for or create, as ciliumoperator.Config sets them), and the endpoints kubeconfig.
	config := configMaps[cilium.ConfigMapName]
	for k, v := range ciliumoperator.Config(9234, 9963) {
		config[k] = v
	}
	configDir, kubeconfigDir := filepath.Join(dir, "config-map"), filepath.Join(dir, "kubeconfig")
	writeFiles(t, configDir, config)
	writeFiles(t, kubeconfigDir, map[string]string{apiserverendpoints.KeyKubeconfig: configMaps[apiserverendpoints.ConfigMapName][apiserverendpoints.KeyKubeconfig]})

	// /etc/hosts as kubelet writes it for a hostNetwork pod (kubernetes pkg/kubelet/kubelet_pods.go
	// nodeHostsFileContent, hostsEntriesFromHostAliases): the node's hosts file, in which the external name resolves to
	// the VIP as DNS would, then the pod's hostAliases.
	hosts := "# Kubernetes-managed hosts file (host network).\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n" +
		vip + "\t" + externalName + "\n"
	if len(pod.Spec.HostAliases) > 0 {
		hosts += "\n# Entries added by HostAliases.\n"
		for _, a := range pod.Spec.HostAliases {
			hosts += a.IP + "\t" + strings.Join(a.Hostnames, "\t") + "\n"
		}
	}
	writeFiles(t, dir, map[string]string{"hosts": hosts})

	environment := podEnv(t, pod, container, node, configMaps)
	for k, v := range overrideEnv {
		if v == "" {
			delete(environment, k)
		} else {
			environment[k] = v
		}
	}
	args := expand(slices.Concat(container.Command[1:], container.Args), environment)

	binary, err := ciliumoperator.Binary()
	if err != nil {
		t.Fatal(err)
	}
	script := strings.Join([]string{
		"set -e",
		"mount --bind " + filepath.Join(dir, "hosts") + " /etc/hosts",
		"mount -t tmpfs tmpfs /run",
		"mkdir -p /run/secrets/kubernetes.io/serviceaccount /run/cilium",
		"mount --bind " + saDir + " /run/secrets/kubernetes.io/serviceaccount",
		"mount -t tmpfs tmpfs /var/lib",
		"mkdir -p " + apiserverendpoints.MountPath,
		"mount --bind " + kubeconfigDir + " " + apiserverendpoints.MountPath,
		"mkdir -p /tmp/cilium",
		"mount -t tmpfs tmpfs /tmp/cilium",
		"mkdir -p /tmp/cilium/config-map",
		"mount --bind " + configDir + " /tmp/cilium/config-map",
		`exec "$@"`,
	}, "\n")
	cmd := ns.command("unshare", append([]string{"--mount", "--propagation", "private", "--", "/bin/sh", "-c", script, "sh", binary}, args...)...)
	cmd.Env = nil
	for k, v := range environment {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Env = append(cmd.Env, "PATH=/usr/sbin:/usr/bin:/sbin:/bin")
	process, err := testenv.StartCommand(filepath.Join(env.Dir, "connect", strings.ReplaceAll(t.Name(), "/", "_")+".log"), cmd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		process.Stop(context.Background())
		if t.Failed() {
			t.Logf("--- cilium-operator log ---\n%s", process.LogTail(40))
		}
	})
	return process
}

func readConfigMaps(t *testing.T) map[string]map[string]string {
	t.Helper()
	out := map[string]map[string]string{}
	for _, name := range []string{cilium.ConfigMapName, apiserverendpoints.ConfigMapName} {
		cm := &corev1.ConfigMap{}
		if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: cilium.Namespace, Name: name}, cm); err != nil {
			t.Fatal(err)
		}
		out[name] = cm.Data
	}
	return out
}

func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// podEnv is the environment kubelet gives the container: the `kubernetes` Service's variables first, then the
// container's own in order, with ConfigMap keys, the downward API and $(VAR) references resolved.
func podEnv(t *testing.T, pod *corev1.Pod, c corev1.Container, node string, configMaps map[string]map[string]string) map[string]string {
	t.Helper()
	out := map[string]string{
		"KUBERNETES_SERVICE_HOST": clusterIP, "KUBERNETES_SERVICE_PORT": "443", "KUBERNETES_SERVICE_PORT_HTTPS": "443",
		"KUBERNETES_PORT": "tcp://" + clusterIP + ":443",
	}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			out[e.Name] = expand([]string{e.Value}, out)[0]
		case e.ValueFrom.ConfigMapKeyRef != nil:
			if v, ok := configMaps[e.ValueFrom.ConfigMapKeyRef.Name][e.ValueFrom.ConfigMapKeyRef.Key]; ok {
				out[e.Name] = v
			}
		case e.ValueFrom.FieldRef != nil:
			switch e.ValueFrom.FieldRef.FieldPath {
			case "metadata.namespace":
				out[e.Name] = pod.Namespace
			case "spec.nodeName":
				out[e.Name] = node
			case "metadata.name":
				out[e.Name] = pod.Name
			}
		}
	}
	return out
}

var reference = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

func expand(in []string, env map[string]string) []string {
	out := make([]string, len(in))
	for i, s := range in {
		out[i] = reference.ReplaceAllStringFunc(s, func(ref string) string {
			if v, ok := env[ref[2:len(ref)-1]]; ok {
				return v
			}
			return ref
		})
	}
	return out
}

// waitUntilLeading waits until the operator has taken its leader lease, which it does only over a working, verified
// connection with its own token.
func waitUntilLeading(t *testing.T, p *testenv.Process) {
	t.Helper()
	if err := testenv.WaitFor(context.Background(), 2*time.Minute, func(ctx context.Context) (bool, error) {
		select {
		case <-p.Stopped():
			return false, fmt.Errorf("cilium-operator stopped: %v", p.Err())
		default:
		}
		lease := &coordinationv1.Lease{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: cilium.Namespace, Name: "cilium-operator-resource-lock"}, lease); err != nil {
			return false, err
		}
		return lease.Spec.HolderIdentity != nil && *lease.Spec.HolderIdentity != "", nil
	}); err != nil {
		t.Fatalf("the operator did not connect and lead: %v", err)
	}
}

// reached lists the addresses the operator connected to.
func reached() map[string]int {
	out := map[string]int{}
	for addr, ep := range endpoints {
		if n := ep.count(); n > 0 {
			out[addr] = n
		}
	}
	return out
}

// assertReached checks that the operator reached only addresses among allowed, at least one of them, and never the
// ClusterIP or the VIP.
func assertReached(t *testing.T, allowed ...string) {
	t.Helper()
	got := reached()
	if len(got) == 0 {
		t.Error("no connection to any kube-apiserver address")
	}
	for addr := range got {
		if !slices.Contains(allowed, addr) {
			t.Errorf("connected to %s (%d times), allowed only %v", addr, got[addr], allowed)
		}
	}
	t.Logf("connections: %v", got)
}

func controlPlaneAddresses() []string {
	var out []string
	for _, ip := range controlPlaneIPs {
		out = append(out, ip+":443")
	}
	return out
}

// stayAfterSync keeps the operator running for a while after it leads, so that a later switch (to the ClusterIP, as
// a >= 1.18 agent with several URLs does once synced) would show.
func stayAfterSync(t *testing.T, p *testenv.Process) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case <-p.Stopped():
			t.Fatalf("cilium-operator stopped: %v", p.Err())
		case <-deadline:
			return
		case <-time.After(time.Second):
		}
	}
}

// TestOperatorOffControlPlane: the operator's pod, admitted without a node, reaches the control-plane nodes'
// kube-apiservers by InternalIP and verifies Gardener's certificate under the server name.
func TestOperatorOffControlPlane(t *testing.T) {
	pod := admitted(t, ciliumchart.DeploymentPod(installCilium(t)))
	if len(pod.Spec.HostAliases) != len(controlPlaneIPs) {
		t.Fatalf("hostAliases %+v", pod.Spec.HostAliases)
	}
	p := run(t, pod, "worker-0", nil)
	waitUntilLeading(t, p)
	stayAfterSync(t, p)
	assertReached(t, controlPlaneAddresses()...)
}

// TestOperatorOffControlPlaneWithADeadNode: with the kube-apiserver the pod dials first gone, it fails over.
func TestOperatorOffControlPlaneWithADeadNode(t *testing.T) {
	pod := admitted(t, ciliumchart.DeploymentPod(installCilium(t)))
	dead := endpoints[pod.Spec.HostAliases[0].IP+":443"]
	dead.stop()
	t.Cleanup(func() {
		if err := dead.start(); err != nil {
			t.Error(err)
		}
	})
	p := run(t, pod, "worker-0", nil)
	waitUntilLeading(t, p)
	assertReached(t, slices.DeleteFunc(controlPlaneAddresses(), func(a string) bool { return a == dead.addr })...)
}

// TestOperatorOnControlPlane: scheduled onto a control-plane node, the operator talks to that node's kube-apiserver.
func TestOperatorOnControlPlane(t *testing.T) {
	pod := ciliumchart.DeploymentPod(installCilium(t))
	pod.Spec.NodeName = "cp-1"
	pod = admitted(t, pod)
	p := run(t, pod, "cp-1", nil)
	waitUntilLeading(t, p)
	stayAfterSync(t, p)
	assertReached(t, "127.0.0.1:443")
}

// TestOperatorFromTemplate: a pod created from the admitted template while the webhook is unreachable uses the
// endpoints ConfigMap's kubeconfig and rotates over the control-plane URLs.
func TestOperatorFromTemplate(t *testing.T) {
	pod := ciliumchart.DeploymentPod(installCilium(t))
	pod.Name = "cilium-operator-unadmitted"
	p := run(t, pod, "worker-1", nil)
	waitUntilLeading(t, p)
	stayAfterSync(t, p)
	assertReached(t, controlPlaneAddresses()...)
}

// TestBareInternalIPsFailVerification: what the webhook gave pods off the control plane before, the control-plane
// InternalIPs as host and URLs, fails TLS verification against Gardener's certificate, which holds no node IP.
func TestBareInternalIPsFailVerification(t *testing.T) {
	pod := ciliumchart.DeploymentPod(installCilium(t))
	pod.Name = "cilium-operator-bare-ips"
	var urls []string
	for _, ip := range controlPlaneIPs {
		urls = append(urls, apiserverendpoints.URL(ip))
	}
	run(t, pod, "worker-1", map[string]string{
		cilium.EnvServiceHost: controlPlaneIPs[0], cilium.EnvAPIServerURLs: strings.Join(urls, ","), cilium.EnvKubeconfigPath: "",
	})
	// Cilium logs only that it rotates: every handshake fails and it dials the next URL at once.
	if err := testenv.WaitFor(context.Background(), time.Minute, func(context.Context) (bool, error) {
		n := 0
		for _, addr := range controlPlaneAddresses() {
			n += endpoints[addr].count()
		}
		return n >= 20, fmt.Errorf("%d connections", n)
	}); err != nil {
		t.Errorf("the operator did not keep rotating over the control-plane addresses: %v", err)
	}
	lease := &coordinationv1.Lease{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: cilium.Namespace, Name: "cilium-operator-resource-lock"}, lease); !apierrors.IsNotFound(err) {
		t.Errorf("the operator with bare IPs got a lease: %v %+v", err, lease.Spec.HolderIdentity)
	}
	// Why: Go verifies an IP host against the certificate's IP SANs, as Cilium's client does for a bare-IP URL.
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(testenv.GardenerCertificates.CA.CertificatePEM)
	apiServer, _ := urlHost(env.Config.Host)
	conn, err := tls.Dial("tcp", apiServer, &tls.Config{RootCAs: roots, ServerName: controlPlaneIPs[0]})
	if err == nil {
		conn.Close()
		t.Fatal("the certificate verified for a control-plane InternalIP")
	}
	if !strings.Contains(err.Error(), "x509: certificate is valid for") {
		t.Errorf("handshake error %v, want an x509 name mismatch", err)
	}
	t.Logf("as expected: %v", err)
}
