package podrun

import (
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"sync"

	"golang.org/x/sys/unix"
)

// netns is a network namespace of the test's own with only a loopback interface: the processes started in it stand
// for Cilium's pods on a node, and whatever they dial that the test does not serve there fails, never reaching the
// machine's network.
type netns struct {
	name string
}

func newNetns(name string, addresses ...string) (*netns, error) {
	n := &netns{name: name}
	if err := runCommand("ip", "netns", "add", name); err != nil {
		return nil, err
	}
	if err := runCommand("ip", "-n", name, "link", "set", "lo", "up"); err != nil {
		n.delete()
		return nil, err
	}
	for _, a := range addresses {
		if err := runCommand("ip", "-n", name, "addr", "add", a, "dev", "lo"); err != nil {
			n.delete()
			return nil, err
		}
	}
	return n, nil
}

func (n *netns) delete() { _ = runCommand("ip", "netns", "delete", n.name) }

// listen opens a TCP listener inside the namespace: the socket keeps the namespace it was created in.
func (n *netns) listen(addr string) (net.Listener, error) {
	f, err := os.Open("/run/netns/" + n.name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	self, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
	if err != nil {
		return nil, err
	}
	defer self.Close()
	if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
		return nil, err
	}
	l, listenErr := net.Listen("tcp", addr)
	if err := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); err != nil {
		// The thread is in the wrong namespace: let it die with its goroutine rather than serve anyone else.
		runtime.Goexit()
	}
	return l, listenErr
}

// command runs name with args inside the namespace.
func (n *netns) command(name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", n.name, name}, args...)...)
}

func runCommand(name string, args ...string) error {
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("%s %v: %w: %s", name, args, err, out)
	}
	return nil
}

// endpoint is an address inside the namespace: a TCP proxy to kube-apiserver standing for the kube-apiserver of a
// node (forward), or a trap that only counts who dials it (the ClusterIP, the VIP). It can be switched off, which
// refuses connections as a node's dead kube-apiserver does.
type endpoint struct {
	addr    string
	forward string
	ns      *netns

	mu       sync.Mutex
	listener net.Listener
	conns    []net.Conn
	accepted int
}

func (e *endpoint) start() error {
	l, err := e.ns.listen(e.addr)
	if err != nil {
		return err
	}
	e.mu.Lock()
	e.listener = l
	e.mu.Unlock()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			e.mu.Lock()
			e.accepted++
			e.conns = append(e.conns, c)
			e.mu.Unlock()
			if e.forward == "" {
				_ = c.Close()
				continue
			}
			go pipe(c, e.forward)
		}
	}()
	return nil
}

// stop closes the listener and every connection it accepted.
func (e *endpoint) stop() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.listener != nil {
		_ = e.listener.Close()
		e.listener = nil
	}
	for _, c := range e.conns {
		_ = c.Close()
	}
	e.conns = nil
}

// count is how many connections the endpoint accepted; reset sets it to zero.
func (e *endpoint) count() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.accepted
}

func (e *endpoint) reset() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.accepted = 0
}

func pipe(c net.Conn, to string) {
	defer c.Close()
	upstream, err := net.Dial("tcp", to)
	if err != nil {
		return
	}
	defer upstream.Close()
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		done <- struct{}{}
	}
	go cp(upstream, c)
	go cp(c, upstream)
	<-done
}
