// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

// Package podrun runs a container of an admitted Cilium pod the way kubelet would run it on a node of a self-hosted
// shoot, with the real Cilium binary, so that tests and the demo observe which kube-apiserver it reaches and whether
// it verifies the certificate.
//
// A Sandbox is a network namespace of the caller's own with only a loopback interface; it stands for the node's
// network. The control-plane InternalIPs (loopback addresses) are proxies to the caller's kube-apiserver that can be
// switched off; 127.0.0.1:443 is the local kube-apiserver of a control-plane node; the `kubernetes` ClusterIP and the
// exposure VIP (which the external name resolves to) are traps that count who dials them. Nothing a process dials
// leaves the namespace. Each container runs in a private mount namespace with what kubelet would give it: the
// service-account token and CA at the in-cluster path, /etc/hosts with the pod's hostAliases, its ConfigMap volumes
// and emptyDirs, and the environment kubelet builds.
package podrun

import (
	"context"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/ciliumbin"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/image"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/testenv"
)

// LocalAPIServer is where a control-plane node's own kube-apiserver answers, as the static pod does on the host.
const LocalAPIServer = "127.0.0.1:443"

// Network says what the sandbox holds.
type Network struct {
	// Name of the network namespace; unique on the machine.
	Name string
	// APIServer is host:port of the kube-apiserver behind the control-plane addresses and LocalAPIServer.
	APIServer string
	// ControlPlaneIPs are the control-plane nodes' InternalIPs: loopback addresses other than 127.0.0.1, or addresses
	// the sandbox puts on its own loopback interface (an EndpointSlice may not hold a loopback address).
	ControlPlaneIPs []string
	// ClusterIP is the `kubernetes` Service's ClusterIP, VIP the exposure's; both are traps.
	ClusterIP, VIP string
	// ExternalName is the shoot's external API name: the node's hosts file resolves it to VIP, as DNS would.
	ExternalName string
}

// Sandbox is a node's network as Cilium's pods on a self-hosted shoot see it.
type Sandbox struct {
	Network
	ns *Netns

	mu        sync.Mutex
	endpoints map[string]*Endpoint
	// images, when set, runs the containers of the images it holds, imageRefs, from them (UseImages).
	images    *image.Runtime
	imageRefs []string
}

// NewSandbox creates the network namespace and starts its endpoints: every control-plane address and LocalAPIServer
// forward to kube-apiserver, the ClusterIP and the VIP are traps.
func NewSandbox(n Network) (*Sandbox, error) {
	onLoopback := []string{n.ClusterIP + "/32", n.VIP + "/32"}
	for _, ip := range n.ControlPlaneIPs {
		if addr, err := netip.ParseAddr(ip); err == nil && !addr.IsLoopback() {
			onLoopback = append(onLoopback, netip.PrefixFrom(addr, addr.BitLen()).String())
		}
	}
	ns, err := NewNetns(n.Name, onLoopback...)
	if err != nil {
		return nil, err
	}
	addresses := map[string]string{LocalAPIServer: n.APIServer, n.ClusterIP + ":443": "", n.VIP + ":443": ""}
	for _, ip := range n.ControlPlaneIPs {
		addresses[ip+":443"] = n.APIServer
	}
	return Attach(ns, n, addresses)
}

// Attach makes a sandbox of an existing namespace with endpoints, address -> where it forwards ("" for a trap). Close
// deletes the namespace.
func Attach(ns *Netns, n Network, addresses map[string]string) (*Sandbox, error) {
	s := &Sandbox{Network: n, ns: ns, endpoints: map[string]*Endpoint{}}
	for addr, forward := range addresses {
		ep := NewEndpoint(ns, addr, forward)
		if err := ep.Start(); err != nil {
			s.Close()
			return nil, fmt.Errorf("listening on %s in the namespace: %w", addr, err)
		}
		s.endpoints[addr] = ep
	}
	return s, nil
}

// Close stops the endpoints and deletes the namespace.
func (s *Sandbox) Close() {
	for _, ep := range s.Endpoints() {
		ep.Stop()
	}
	s.ns.Delete()
}

// ControlPlaneAddresses are the control-plane InternalIPs with port 443.
func (s *Sandbox) ControlPlaneAddresses() []string {
	out := make([]string, 0, len(s.ControlPlaneIPs))
	for _, ip := range s.ControlPlaneIPs {
		out = append(out, ip+":443")
	}
	return out
}

// Reached counts the connections accepted since the last Reset, by address, leaving out addresses nobody dialled.
func (s *Sandbox) Reached() map[string]int {
	out := map[string]int{}
	for addr, ep := range s.Endpoints() {
		if n := ep.Count(); n > 0 {
			out[addr] = n
		}
	}
	return out
}

// Netns is the sandbox's network namespace.
func (s *Sandbox) Netns() *Netns { return s.ns }

// Endpoints are the sandbox's endpoints by address.
func (s *Sandbox) Endpoints() map[string]*Endpoint {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.endpoints)
}

// Serve starts an endpoint at addr that forwards to forward, unless the sandbox has one there: a node's kube-apiserver
// serving on an address the node got later, as it does since it listens on every address of the node.
func (s *Sandbox) Serve(addr, forward string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.endpoints[addr]; ok {
		return nil
	}
	ep := NewEndpoint(s.ns, addr, forward)
	if err := ep.Start(); err != nil {
		return fmt.Errorf("listening on %s in the namespace: %w", addr, err)
	}
	s.endpoints[addr] = ep
	return nil
}

// IP runs `ip` with args inside the sandbox's network namespace.
func (s *Sandbox) IP(args ...string) error { return s.ns.IP(args...) }

// DialContext dials from inside the sandbox's network namespace.
func (s *Sandbox) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	return s.ns.DialContext(ctx, network, addr)
}

// Endpoint is the endpoint at addr, if the sandbox has one.
func (s *Sandbox) Endpoint(addr string) (*Endpoint, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ep, ok := s.endpoints[addr]
	return ep, ok
}

// Reset sets every count to zero.
func (s *Sandbox) Reset() {
	for _, ep := range s.Endpoints() {
		ep.Reset()
	}
}

// SwitchOff makes addr refuse connections, as a dead kube-apiserver does; SwitchOn starts it again.
func (s *Sandbox) SwitchOff(addr string) {
	if ep, ok := s.Endpoint(addr); ok {
		ep.Stop()
	}
}

// SwitchOn starts addr again after SwitchOff.
func (s *Sandbox) SwitchOn(addr string) error {
	ep, ok := s.Endpoint(addr)
	if !ok {
		return fmt.Errorf("no endpoint at %s", addr)
	}
	return ep.Start()
}

// BlackHole makes addr (host:port) drop every packet sent to it, as a node that is powered off, partitioned or whose
// link is down does: nothing refuses, a connection attempt times out. It returns how to undo it.
func (s *Sandbox) BlackHole(addr string) (func() error, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	// The raw table's OUTPUT comes first for what the namespace's processes send, loopback included.
	rule := []string{"OUTPUT", "-d", host, "-p", "tcp", "--dport", port, "-j", "DROP"}
	iptables := func(op string) error {
		return runCommand("ip", append([]string{"netns", "exec", s.ns.Name(), "iptables", "-w", "-t", "raw", op}, rule...)...)
	}
	if err := iptables("-I"); err != nil {
		return nil, err
	}
	return func() error { return iptables("-D") }, nil
}

// Container is one container of an admitted pod, with what kubelet would give it.
type Container struct {
	Pod *corev1.Pod
	// Name of the container in Pod, init containers included.
	Name string
	// Node is the node the pod runs on (spec.nodeName of the running pod).
	Node string
	// PodIP is the pod's status.podIP; kubelet reports a hostNetwork pod's as its node's InternalIP.
	PodIP string
	// Binary replaces the container's command[0], or is the image's entrypoint for a container without a command.
	Binary string
	// ConfigMaps are the cluster's ConfigMaps by name, for env references and volumes.
	ConfigMaps map[string]map[string]string
	// Token and CA are the service-account volume's token and ca.crt.
	Token string
	CA    []byte
	// Env overrides variables of the environment kubelet builds; an empty value removes one.
	Env map[string]string
	// Args are appended to the container's arguments (settings a node here cannot take from the chart).
	Args []string
	// Tools are programs the container finds first on its PATH: name -> path on the machine, outside /tmp.
	Tools map[string]string
	// Cgroup, if set, is a cgroup2 directory the container runs in, in a cgroup namespace of its own rooted there.
	Cgroup string
	// HostPaths are directories of the node bound into the container (what the pod's hostPath volumes give it on a
	// real node): path inside the container -> directory on the machine.
	HostPaths map[string]string
	// Setup are shell lines run in the container's mount namespace after its volumes are mounted.
	Setup []string
	// Dir is a scratch directory for the container's files; LogPath where its output goes.
	Dir, LogPath string
}

// Started is a running container.
type Started struct {
	*testenv.Process
	volumes map[string]string
	// Container is the container runtime's name of a container run from its image, "" for one run as a process.
	Container string
	// remove, for a container run from its image, removes what the runtime keeps of it.
	remove func()
}

// Stop stops the container as kubelet does (SIGTERM, then SIGKILL after the grace period) and removes what the
// runtime keeps of it.
func (s *Started) Stop(ctx context.Context) {
	s.Process.Stop(ctx)
	if s.remove != nil {
		s.remove()
	}
}

// Kill ends the container at once.
func (s *Started) Kill() {
	s.Process.Kill()
	if s.remove != nil {
		s.remove()
	}
}

// HostPath is where path inside the container lies on the host, for a path in one of its emptyDir or ConfigMap
// volumes.
func (s *Started) HostPath(path string) (string, bool) {
	for mountPath, dir := range s.volumes {
		if rel, err := filepath.Rel(mountPath, path); err == nil && !strings.HasPrefix(rel, "..") {
			return filepath.Join(dir, rel), true
		}
	}
	return "", false
}

// Start runs the container in the sandbox.
func (s *Sandbox) Start(c Container) (*Started, error) {
	containers := slices.Concat(c.Pod.Spec.InitContainers, c.Pod.Spec.Containers)
	i := slices.IndexFunc(containers, func(ct corev1.Container) bool { return ct.Name == c.Name })
	if i < 0 {
		return nil, fmt.Errorf("pod %s has no container %s", c.Pod.Name, c.Name)
	}
	container := containers[i]
	s.mu.Lock()
	images := s.images
	fromImage := slices.Contains(s.imageRefs, container.Image)
	s.mu.Unlock()
	if images != nil && fromImage {
		return s.startImage(*images, c, container)
	}
	if err := writeScratch(c); err != nil {
		return nil, err
	}
	script, volumes, err := mountScript(c, container)
	if err != nil {
		return nil, err
	}
	if err := writeFiles(c.Dir, map[string]string{"hosts": s.hostsFile(c.Pod)}); err != nil {
		return nil, err
	}
	binary, err := linkBinary(c, container)
	if err != nil {
		return nil, err
	}
	environment := s.containerEnv(c, container)
	// Binary stands for command[0] or, without a command, for the image's entrypoint.
	command := container.Command
	if len(command) > 0 {
		command = command[1:]
	}
	args := slices.Concat(expand(slices.Concat(command, container.Args), environment), c.Args)
	cmd := s.command(c, append([]string{"/bin/sh", "-c", strings.Join(script, "\n"), "sh", binary}, args...))
	path := "/usr/sbin:/usr/bin:/sbin:/bin"
	if len(c.Tools) > 0 {
		path = filepath.Join(scratch, "bin") + ":" + path
	}
	cmd.Env = []string{"PATH=" + path}
	for _, k := range slices.Sorted(maps.Keys(environment)) {
		cmd.Env = append(cmd.Env, k+"="+environment[k])
	}
	process, err := testenv.StartCommand(c.LogPath, cmd)
	if err != nil {
		return nil, err
	}
	return &Started{Process: process, volumes: volumes}, nil
}

// scratch is where the container sees its scratch directory (Container.Dir, which may lie under the /tmp it hides).
const scratch = "/run/podrun"

// writeScratch writes the container's tools and service-account files into its scratch directory.
func writeScratch(c Container) error {
	if err := os.MkdirAll(filepath.Join(c.Dir, "bin"), 0o755); err != nil {
		return err
	}
	for name, target := range c.Tools {
		if err := os.Symlink(target, filepath.Join(c.Dir, "bin", name)); err != nil && !os.IsExist(err) {
			return err
		}
	}
	return writeFiles(filepath.Join(c.Dir, "serviceaccount"), map[string]string{
		corev1.ServiceAccountTokenKey:     c.Token,
		corev1.ServiceAccountRootCAKey:    string(c.CA),
		corev1.ServiceAccountNamespaceKey: c.Pod.Namespace,
	})
}

// mountScript is the shell that builds the container's mount namespace, ending in exec of its binary, and where
// each of its emptyDir and ConfigMap volumes lies on the host, by mount path.
func mountScript(c Container, container corev1.Container) ([]string, map[string]string, error) {
	// /tmp and /var/lib get a tmpfs, so that mount points below them need not exist on the machine; volumes mount
	// only there.
	script := []string{
		"set -e",
		"mount --bind " + filepath.Join(c.Dir, "hosts") + " /etc/hosts",
		"mount -t tmpfs tmpfs /run",
		"mkdir -p /run/secrets/kubernetes.io/serviceaccount /run/cilium " + scratch,
		"mount --bind " + c.Dir + " " + scratch,
		"mount --bind " + filepath.Join(scratch, "serviceaccount") + " /run/secrets/kubernetes.io/serviceaccount",
	}
	// Before /tmp and /var/lib are hidden, where the directories may lie; shorter paths first. A directory that is a
	// mount point (a node's bpffs) is moved rather than bound: the container's mount table then has it only where the
	// pod mounts it, as a node's would (the agent takes the first bpffs of its mount table for its own).
	for _, path := range slices.SortedFunc(maps.Keys(c.HostPaths), func(a, b string) int { return len(a) - len(b) }) {
		host := c.HostPaths[path]
		script = append(script, "mkdir -p "+path, "if mountpoint -q "+host+"; then mount --move "+host+" "+path+"; else mount --bind "+host+" "+path+"; fi")
	}
	script = append(script, "mount -t tmpfs tmpfs /var/lib", "mount -t tmpfs tmpfs /tmp")
	volumes := map[string]string{}
	mounts := slices.Clone(container.VolumeMounts)
	slices.SortFunc(mounts, func(a, b corev1.VolumeMount) int { return len(a.MountPath) - len(b.MountPath) })
	for _, vm := range mounts {
		files, exact, err := volumeFiles(c, vm)
		if err != nil {
			return nil, nil, err
		}
		if files == nil {
			continue // host paths and the like: not what decides how the container reaches kube-apiserver
		}
		if !strings.HasPrefix(vm.MountPath, "/tmp") && !strings.HasPrefix(vm.MountPath, "/var/lib/") {
			return nil, nil, fmt.Errorf("volume %s at %s, outside the tmpfs mounts of this runner", vm.Name, vm.MountPath)
		}
		source := filepath.Join("volumes", vm.Name)
		if !exact {
			// An emptyDir lives as long as its pod: kept across the container's restarts, new for a new pod.
			source = filepath.Join("volumes", string(c.Pod.UID), vm.Name)
		}
		if exact {
			// A ConfigMap volume holds what the ConfigMap holds now, nothing an earlier pod's volume of that name held.
			if err := os.RemoveAll(filepath.Join(c.Dir, source)); err != nil {
				return nil, nil, err
			}
		}
		if err := writeFiles(filepath.Join(c.Dir, source), files); err != nil {
			return nil, nil, err
		}
		volumes[vm.MountPath] = filepath.Join(c.Dir, source)
		script = append(script, "mkdir -p "+vm.MountPath, "mount --bind "+filepath.Join(scratch, source)+" "+vm.MountPath)
	}
	script = append(script, c.Setup...)
	if sc := container.SecurityContext; sc != nil && ptr.Deref(sc.ReadOnlyRootFilesystem, false) {
		// As kubelet mounts a read-only root filesystem: writable only where a volume is mounted.
		script = append(script, "mount -o remount,ro /tmp", "mount -o remount,ro /var/lib")
	}
	return append(script, `exec "$@"`), volumes, nil
}

// volumeFiles are the files of the volume that vm mounts if it is a ConfigMap (exact: it holds them and nothing else)
// or an emptyDir (none to begin with; what the container wrote stays across its restarts, not for the next pod), else
// nil.
func volumeFiles(c Container, vm corev1.VolumeMount) (files map[string]string, exact bool, err error) {
	j := slices.IndexFunc(c.Pod.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == vm.Name })
	if j < 0 {
		return nil, false, fmt.Errorf("container %s mounts volume %s, which the pod does not have", c.Name, vm.Name)
	}
	volume := c.Pod.Spec.Volumes[j]
	switch {
	case volume.ConfigMap != nil:
		data, found := c.ConfigMaps[volume.ConfigMap.Name]
		if !found && !ptr.Deref(volume.ConfigMap.Optional, false) {
			return nil, false, fmt.Errorf("the pod mounts ConfigMap %s, which does not exist", volume.ConfigMap.Name)
		}
		files = map[string]string{}
		if len(volume.ConfigMap.Items) == 0 {
			maps.Copy(files, data)
			return files, true, nil
		}
		for _, item := range volume.ConfigMap.Items {
			files[item.Path] = data[item.Key]
		}
		return files, true, nil
	case volume.EmptyDir != nil:
		return map[string]string{}, false, nil
	}
	return nil, false, nil
}

// hostsFile is /etc/hosts as kubelet writes it for a hostNetwork pod (kubernetes pkg/kubelet/kubelet_pods.go
// nodeHostsFileContent, hostsEntriesFromHostAliases): the node's hosts file, in which the external name resolves to
// the VIP as DNS would, then the pod's hostAliases.
func (s *Sandbox) hostsFile(pod *corev1.Pod) string {
	hosts := "# Kubernetes-managed hosts file (host network).\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n" +
		s.VIP + "\t" + s.ExternalName + "\n"
	if len(pod.Spec.HostAliases) > 0 {
		hosts += "\n# Entries added by HostAliases.\n"
		for _, a := range pod.Spec.HostAliases {
			hosts += a.IP + "\t" + strings.Join(a.Hostnames, "\t") + "\n"
		}
	}
	return hosts
}

// linkBinary puts c.Binary into the scratch directory under the name of the container's command, as the image has
// it, and returns its path inside the container: Cilium's agent goes by its own name (pkg/components IsCiliumAgent) to
// find its bpffs. One under /tmp, which the container's /tmp hides, is linked there rather than pointed to.
func linkBinary(c Container, container corev1.Container) (string, error) {
	name := filepath.Base(c.Binary)
	if len(container.Command) > 0 {
		name = filepath.Base(container.Command[0])
	}
	target, err := filepath.Abs(c.Binary)
	if err != nil {
		return "", err
	}
	link := os.Symlink
	if strings.HasPrefix(target, "/tmp/") {
		link = os.Link
	}
	if err := os.Remove(filepath.Join(c.Dir, "bin", name)); err != nil && !os.IsNotExist(err) {
		return "", err
	}
	if err := link(target, filepath.Join(c.Dir, "bin", name)); err != nil {
		return "", err
	}
	return filepath.Join(scratch, "bin", name), nil
}

// command runs inNamespaces (the mount script and its arguments) in a private mount namespace of the sandbox's
// network namespace and, with c.Cgroup, in a cgroup namespace rooted at that cgroup.
func (s *Sandbox) command(c Container, inNamespaces []string) *exec.Cmd {
	unshare := []string{"unshare", "--mount", "--propagation", "private"}
	if c.Cgroup == "" {
		return s.ns.Command(unshare[0], slices.Concat(unshare[1:], []string{"--"}, inNamespaces)...)
	}
	// Join the cgroup first, so that the cgroup namespace is rooted there.
	unshare = append(unshare, "--cgroup", "--")
	return exec.Command("/bin/sh", slices.Concat([]string{"-c", `echo $$ > "$0/cgroup.procs" && exec "$@"`, c.Cgroup, "ip", "netns", "exec", s.ns.Name()}, unshare, inNamespaces)...)
}

// ForPod is container name of pod as kubelet would start it in env's cluster: the Cilium binary its command runs
// (test/framework/ciliumbin), a token of the pod's ServiceAccount, and the cluster CA of Gardener's certificates. The caller
// adds the node, the ConfigMaps and the directories.
func ForPod(ctx context.Context, env *testenv.Env, pod *corev1.Pod, name string) (Container, error) {
	containers := slices.Concat(pod.Spec.InitContainers, pod.Spec.Containers)
	i := slices.IndexFunc(containers, func(c corev1.Container) bool { return c.Name == name })
	if i < 0 {
		return Container{}, fmt.Errorf("pod %s has no container %s", pod.Name, name)
	}
	bin, ok := ciliumbin.ForContainer(containers[i])
	if !ok {
		return Container{}, fmt.Errorf("container %s of pod %s runs no Cilium binary this harness has", name, pod.Name)
	}
	binary, err := ciliumbin.PathFor(bin, containers[i].Image)
	if err != nil {
		return Container{}, err
	}
	token, err := Token(ctx, env.Config, pod)
	if err != nil {
		return Container{}, err
	}
	if env.Certificates == nil {
		return Container{}, fmt.Errorf("kube-apiserver serves no Gardener certificates (ShootCertificates)")
	}
	return Container{Pod: pod, Name: name, Binary: binary, Token: token, CA: env.Certificates.CA.CertificatePEM}, nil
}

// Token is a token of pod's ServiceAccount, as the kubelet's projected service-account volume holds it: bound to the
// pod when it is stored (k8s.io/kubernetes pkg/volume/projected/projected.go), so that kube-apiserver stops accepting
// it once the pod is deleted; a pod that was only admitted as a dry run has no identity to bind to.
func Token(ctx context.Context, config *rest.Config, pod *corev1.Pod) (string, error) {
	cs, err := kubernetes.NewForConfig(config)
	if err != nil {
		return "", err
	}
	spec := authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}
	if pod.UID != "" {
		spec.BoundObjectRef = &authenticationv1.BoundObjectReference{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID}
	}
	token, err := cs.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(ctx, pod.Spec.ServiceAccountName,
		&authenticationv1.TokenRequest{Spec: spec}, metav1.CreateOptions{})
	if err != nil {
		return "", err
	}
	return token.Status.Token, nil
}

func writeFiles(dir string, files map[string]string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// containerEnv is podEnv with c.Env's overrides: an empty value removes a variable.
func (s *Sandbox) containerEnv(c Container, container corev1.Container) map[string]string {
	environment := s.podEnv(c, container)
	for k, v := range c.Env {
		if v == "" {
			delete(environment, k)
		} else {
			environment[k] = v
		}
	}
	return environment
}

// podEnv is the environment kubelet gives the container: the `kubernetes` Service's variables first, then the
// container's own in order, with ConfigMap keys, the downward API and $(VAR) references resolved.
func (s *Sandbox) podEnv(pc Container, c corev1.Container) map[string]string {
	pod, configMaps := pc.Pod, pc.ConfigMaps
	out := map[string]string{
		"KUBERNETES_SERVICE_HOST": s.ClusterIP, "KUBERNETES_SERVICE_PORT": "443", "KUBERNETES_SERVICE_PORT_HTTPS": "443",
		"KUBERNETES_PORT": "tcp://" + s.ClusterIP + ":443",
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
				out[e.Name] = pc.Node
			case "status.podIP":
				out[e.Name] = pc.PodIP
			case "metadata.name":
				out[e.Name] = pod.Name
			case "metadata.uid":
				out[e.Name] = string(pod.UID)
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

// Peers are the remote addresses (ip:port) of the container process's established TCP connections over IPv4, read from
// its file descriptors and its network namespace's /proc/<pid>/net/tcp: the address pairs of its own connections,
// not of other processes on the node.
func (s *Started) Peers() ([]string, error) {
	pid := strconv.Itoa(s.Pid())
	fds, err := os.ReadDir(filepath.Join("/proc", pid, "fd"))
	if err != nil {
		return nil, err
	}
	inodes := map[string]bool{}
	for _, fd := range fds {
		if target, err := os.Readlink(filepath.Join("/proc", pid, "fd", fd.Name())); err == nil {
			if inode, ok := strings.CutPrefix(target, "socket:["); ok {
				inodes[strings.TrimSuffix(inode, "]")] = true
			}
		}
	}
	table, err := os.ReadFile(filepath.Join("/proc", pid, "net", "tcp"))
	if err != nil {
		return nil, err
	}
	var peers []string
	for _, line := range strings.Split(string(table), "\n")[1:] {
		// sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
		f := strings.Fields(line)
		if len(f) < 10 || f[3] != "01" || !inodes[f[9]] {
			continue
		}
		addr, err := hexAddress(f[2])
		if err != nil {
			return nil, err
		}
		peers = append(peers, addr)
	}
	slices.Sort(peers)
	return slices.Compact(peers), nil
}

// hexAddress decodes an IPv4 address:port of /proc/net/tcp (address in host byte order, little-endian here).
func hexAddress(s string) (string, error) {
	ipHex, portHex, ok := strings.Cut(s, ":")
	if !ok || len(ipHex) != 8 {
		return "", fmt.Errorf("not an IPv4 address in /proc/net/tcp: %q", s)
	}
	ip, err := strconv.ParseUint(ipHex, 16, 32)
	if err != nil {
		return "", err
	}
	port, err := strconv.ParseUint(portHex, 16, 16)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%d.%d.%d.%d:%d", byte(ip), byte(ip>>8), byte(ip>>16), byte(ip>>24), port), nil
}
