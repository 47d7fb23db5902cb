// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package app

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/apiserverfailover"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/controller/staleaddress"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/processmodel"
)

const kubeconfig = `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`

func completed(t *testing.T, args ...string) *options {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, []byte(kubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	args = append(args, "--kubeconfig="+path)
	o := newOptions()
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	o.optionAggregator.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	if err := o.complete(); err != nil {
		t.Fatal(err)
	}
	return o
}

// TestSelfHostedOnly: without --self-hosted-shoot-cluster the webhooks and the endpoints controller are off; with it,
// they are on, and --disable-webhooks still works.
func TestSelfHostedOnly(t *testing.T) {
	if !completed(t).webhooks.Completed().Switch.Disabled {
		t.Error("webhooks are on outside a self-hosted shoot")
	}
	if completed(t, "--self-hosted-shoot-cluster").webhooks.Completed().Switch.Disabled {
		t.Error("webhooks are off on a self-hosted shoot")
	}
	o := completed(t, "--self-hosted-shoot-cluster", "--disable-webhooks=cilium-agent,cilium-operator,cilium-config")
	if !o.webhooks.Completed().Switch.Disabled {
		t.Error("--disable-webhooks did not switch the webhooks off")
	}
	for _, name := range selfHostedOnlyControllers {
		for _, tc := range []struct {
			args     []string
			disabled bool
		}{{nil, true}, {[]string{"--self-hosted-shoot-cluster"}, false}} {
			o := completed(t, tc.args...)
			disabled := false
			for _, d := range o.controllers.Disabled {
				disabled = disabled || d == name
			}
			if disabled != tc.disabled {
				t.Errorf("%v: controller %s disabled=%v, want %v", tc.args, name, disabled, tc.disabled)
			}
		}
	}
}

func TestCacheScope(t *testing.T) {
	o := completed(t, "--webhook-config-namespace=extension-x")
	if ns := o.webhooks.Server.Completed().Namespace; ns != "extension-x" {
		t.Errorf("namespace %q", ns)
	}
	for _, tc := range []struct{ namespace, want string }{{"extension-x", "extension-x"}, {"", ""}} {
		secretNamespaces := ""
		for obj, scope := range cacheScope(tc.namespace) {
			if _, ok := obj.(*corev1.Secret); ok {
				for ns := range scope.Namespaces {
					secretNamespaces += ns
				}
			} else if _, ok := scope.Namespaces["kube-system"]; !ok || len(scope.Namespaces) != 1 {
				t.Errorf("%T is not scoped to kube-system: %v", obj, scope.Namespaces)
			}
		}
		if secretNamespaces != tc.want {
			t.Errorf("webhook namespace %q: Secrets cached in %q, want %q", tc.namespace, secretNamespaces, tc.want)
		}
	}
}

// TestClientRateLimits: the REST config gets Gardener's extension rate limits unless the flags say otherwise (client-go's
// 5 QPS throttled every exposure reconciliation), and a limit that would stop the client is refused by name.
func TestClientRateLimits(t *testing.T) {
	cfg := completed(t).rest.Completed().Config
	if cfg.QPS != 100 || cfg.Burst != 130 {
		t.Errorf("default rate limits: QPS %v burst %d, want 100 and 130", cfg.QPS, cfg.Burst)
	}
	cfg = completed(t, "--kube-api-qps=20", "--kube-api-burst=40").rest.Completed().Config
	if cfg.QPS != 20 || cfg.Burst != 40 {
		t.Errorf("flagged rate limits: QPS %v burst %d, want 20 and 40", cfg.QPS, cfg.Burst)
	}
	for _, tc := range []struct{ arg, flag string }{{"--kube-api-qps=0", "--kube-api-qps"}, {"--kube-api-burst=0", "--kube-api-burst"}} {
		o := newOptions()
		fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
		o.optionAggregator.AddFlags(fs)
		if err := fs.Parse([]string{tc.arg}); err != nil {
			t.Fatal(err)
		}
		if err := o.complete(); err == nil || !strings.Contains(err.Error(), tc.flag) {
			t.Errorf("%s: error %v, want one naming %s", tc.arg, err, tc.flag)
		}
	}
}

// TestFailoverDialer: on a self-hosted shoot, the extension's clients fall back from their node's kube-apiserver at
// localhost to the other control-plane nodes'; given any other kube-apiserver, or outside a self-hosted shoot, they
// dial as client-go does.
func TestFailoverDialer(t *testing.T) {
	for _, tc := range []struct {
		host       string
		selfHosted bool
		want       bool
	}{
		{"https://localhost:443", true, true},
		{"https://localhost:443", false, false},
		{"https://127.0.0.1:6443", true, false},
		{"https://api.shoot.example.com", true, false},
	} {
		config := &rest.Config{Host: tc.host}
		d := failoverDialer(config, tc.selfHosted, "10.0.1.10")
		if (d != nil) != tc.want || (config.Dial != nil) != tc.want {
			t.Errorf("%s, self-hosted %t: dialer %v, Dial set %t; want a fallback %t", tc.host, tc.selfHosted, d, config.Dial != nil, tc.want)
		}
	}
}

// TestEveryControllerIsSwitchable: --controllers lists every controller, those that run in every replica too, and
// --disable-controllers takes each of them.
func TestEveryControllerIsSwitchable(t *testing.T) {
	o := newOptions()
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	o.optionAggregator.AddFlags(fs)
	usage := fs.Lookup("controllers").Usage
	kinds := map[processmodel.Where]int{}
	for _, c := range o.controllerList() {
		kinds[c.Where]++
		if !strings.Contains(usage, c.Name) {
			t.Errorf("--controllers' help %q does not list %s", usage, c.Name)
		}
		o := completed(t, "--self-hosted-shoot-cluster", "--disable-controllers="+c.Name)
		if !slices.Contains(o.controllers.Disabled, c.Name) {
			t.Errorf("--disable-controllers=%s: disabled %v", c.Name, o.controllers.Disabled)
		}
	}
	if kinds[processmodel.EveryReplica] == 0 || kinds[processmodel.LeaderTerm] == 0 {
		t.Errorf("controllers by where they run: %v, want both kinds", kinds)
	}
}

// TestEnabledAsTheSwitchesSay: what runs of a controller before the manager exists (the stale-address check, the
// failover dialer) follows --controllers and --disable-controllers as Gardener's switches do.
func TestEnabledAsTheSwitchesSay(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{[]string{"--self-hosted-shoot-cluster"}, true},
		{nil, false},
		{[]string{"--self-hosted-shoot-cluster", "--disable-controllers=" + staleaddress.Name}, false},
		{[]string{"--self-hosted-shoot-cluster", "--controllers=" + apiserverfailover.Name}, false},
		{[]string{"--self-hosted-shoot-cluster", "--controllers=" + staleaddress.Name}, true},
	} {
		if got := processmodel.Enabled(completed(t, tc.args...).controllers, staleaddress.Name); got != tc.want {
			t.Errorf("%v: %s enabled %t, want %t", tc.args, staleaddress.Name, got, tc.want)
		}
	}
}
