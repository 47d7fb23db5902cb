// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package connect

import (
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/fixtures"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/podrun"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/testenv"
)

// TestExtensionReachesItsOwnNodesAPIServer runs the extension as the pod of its chart's Deployment (installed by
// Gardener's resource manager) would run on the control-plane node cp-0: in the host network, with the environment,
// arguments and volumes kubelet gives the container, its ServiceAccount's token and the cluster CA, and no kubeconfig.
// It becomes ready, which needs its caches synced through kube-apiserver, having connected only to its own node's
// kube-apiserver at localhost:443 and verified Gardener's certificate there; never to the `kubernetes` ClusterIP (a
// trap in the sandbox), which Cilium serves. The suite's extension keeps the leader lease, so this replica only reads.
func TestExtensionReachesItsOwnNodesAPIServer(t *testing.T) {
	ready, stop := startExtensionPod(t, nil)
	if err := testenv.WaitFor(context.Background(), time.Minute, ready); err != nil {
		t.Fatalf("readiness: %v", err)
	}
	assertReached(t, podrun.LocalAPIServer)
	stop()

	// The control: with the `kubernetes` Service's address that kubelet puts into every container, as without the
	// chart's override, the same pod dials the ClusterIP.
	t.Run("with kubelet's KUBERNETES_SERVICE_HOST", func(t *testing.T) {
		ready, _ := startExtensionPod(t, map[string]string{"KUBERNETES_SERVICE_HOST": podrun.ClusterIP})
		trap := podrun.ClusterIP + ":443"
		if err := testenv.WaitFor(context.Background(), time.Minute, func(context.Context) (bool, error) {
			return sandbox.Reached()[trap] > 0, nil
		}); err != nil {
			t.Fatalf("no connection to the ClusterIP: %v", err)
		}
		if ok, _ := ready(context.Background()); ok {
			t.Error("ready although its only way to kube-apiserver was the ClusterIP trap")
		}
	})
}

// startExtensionPod starts the extension in the sandbox as the chart's Deployment's pod on cp-0, with env overriding
// the environment kubelet would build, and returns kubelet's readiness probe of it and how to stop it before the test
// ends (it stops then anyway).
func startExtensionPod(t *testing.T, env map[string]string) (ready func(context.Context) (bool, error), stop func()) {
	t.Helper()
	c, err := podrun.ForExtension(context.Background(), envtest, "cp-0", fixtures.ControlPlaneIPs[0])
	if err != nil {
		t.Fatal(err)
	}
	c.Env, c.Dir, c.LogPath = env, t.TempDir(), filepath.Join(envtest.Dir, "connect", strings.ReplaceAll(t.Name(), "/", "_")+".log")
	sandbox.Reset()
	started, err := sandbox.Start(c)
	if err != nil {
		t.Fatal(err)
	}
	stop = sync.OnceFunc(func() {
		started.Stop(context.Background())
		if t.Failed() {
			t.Logf("--- extension pod log ---\n%s", started.LogTail(40))
		}
	})
	t.Cleanup(stop)
	return sandbox.ReadinessProbe(c, started), stop
}
