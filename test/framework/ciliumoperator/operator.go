// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

// Package ciliumoperator runs Cilium's real operator (built from the cilium module by hack/cilium/build.sh)
// as a process against the envtest kube-apiserver, so that LB-IPAM and the BGP control plane are Cilium's own.
package ciliumoperator

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/cilium"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/ciliumbin"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/testenv"
)

// leaseName is the operator's leader-election lease in its namespace; LB-IPAM and BGP run only in the leader.
const leaseName = "cilium-operator-resource-lock"

// Operator is a running cilium-operator.
type Operator struct {
	*testenv.Process
}

// Config is the operator's configuration directory: LB-IPAM, the L2 announcer's class and the BGP control plane on,
// Cilium's CRDs left as the test installed them (otherwise the operator re-registers each and LB-IPAM starts ~17 s
// later), and IPAM and identities that need no kvstore.
func Config(apiPort, prometheusPort int) map[string]string {
	return map[string]string{
		"enable-lb-ipam":                 "true",
		"enable-l2-announcements":        "true",
		"enable-bgp-control-plane":       "true",
		"identity-allocation-mode":       "crd",
		"ipam":                           "kubernetes",
		"k8s-namespace":                  cilium.Namespace,
		"default-lb-service-ipam":        "none",
		"skip-crd-creation":              "true",
		"operator-api-serve-addr":        "127.0.0.1:" + strconv.Itoa(apiPort),
		"operator-prometheus-serve-addr": "127.0.0.1:" + strconv.Itoa(prometheusPort),
	}
}

// Binary is the operator binary: $CILIUM_OPERATOR, else what hack/cilium/build.sh builds or has cached.
func Binary() (string, error) {
	return ciliumbin.Path(ciliumbin.Operator)
}

// Start starts the operator against env with Config plus overrides and waits until it serves and leads.
func Start(ctx context.Context, env *testenv.Env, overrides map[string]string) (*Operator, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	apiPort, err := testenv.FreePort()
	if err != nil {
		return nil, err
	}
	promPort, err := testenv.FreePort()
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(env.Dir, "cilium-operator")
	configDir := filepath.Join(dir, "config")
	if err := os.MkdirAll(configDir, 0o755); err != nil {
		return nil, err
	}
	config := Config(apiPort, promPort)
	maps.Copy(config, overrides)
	for k, v := range config {
		if err := os.WriteFile(filepath.Join(configDir, k), []byte(v), 0o644); err != nil {
			return nil, err
		}
	}

	// The operator creates /var/run/cilium and its shell socket there (operator/cmd/root.go, defaults.RuntimePath):
	// as root, it gets a mount namespace of its own with a private /run, so that nothing is left on the machine.
	args := []string{bin, "--config-dir=" + configDir, "--k8s-kubeconfig-path=" + env.Kubeconfig}
	if os.Getuid() == 0 {
		args = append([]string{"unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c", `mount -t tmpfs tmpfs /run && exec "$@"`, "sh"}, args...)
	}
	process, err := testenv.StartProcess(filepath.Join(dir, "operator.log"), args[0], args[1:]...)
	if err != nil {
		return nil, err
	}
	o := &Operator{Process: process}
	if err := o.waitUntilLeading(ctx, env.Client, apiPort); err != nil {
		o.Stop(ctx)
		return nil, fmt.Errorf("%w\n--- cilium-operator log ---\n%s", err, o.Log())
	}
	return o, nil
}

func (o *Operator) waitUntilLeading(ctx context.Context, c client.Client, apiPort int) error {
	healthz := fmt.Sprintf("http://127.0.0.1:%d/healthz", apiPort)
	return testenv.WaitFor(ctx, 2*time.Minute, func(ctx context.Context) (bool, error) {
		select {
		case <-o.Stopped():
			return false, fmt.Errorf("cilium-operator stopped: %v", o.Err())
		default:
		}
		resp, err := http.Get(healthz)
		if err != nil {
			return false, err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return false, fmt.Errorf("%s: %s", healthz, resp.Status)
		}
		if leading, err := Leading(ctx, c); !leading {
			return false, errors.Join(errors.New("no leader yet"), err)
		}
		return true, nil
	})
}

// Leading tells whether an operator holds the leader lease, which it takes only over a working, verified connection
// with its own credentials.
func Leading(ctx context.Context, c client.Reader) (bool, error) {
	lease := &coordinationv1.Lease{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: cilium.Namespace, Name: leaseName}, lease); err != nil {
		return false, err
	}
	return lease.Spec.HolderIdentity != nil && *lease.Spec.HolderIdentity != "", nil
}

// WaitUntilLeading waits until an operator holds the leader lease, failing at once when p, the operator being
// waited for, has ended.
func WaitUntilLeading(ctx context.Context, c client.Reader, p *testenv.Process) error {
	return testenv.WaitFor(ctx, 2*time.Minute, func(ctx context.Context) (bool, error) {
		select {
		case <-p.Stopped():
			return false, fmt.Errorf("cilium-operator stopped: %v", p.Err())
		default:
		}
		return Leading(ctx, c)
	})
}

// FreeLease deletes the leader lease, so that the next operator leads at once instead of waiting out a stopped one's.
func FreeLease(ctx context.Context, c client.Client) {
	_ = c.Delete(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: cilium.Namespace, Name: leaseName}})
}
