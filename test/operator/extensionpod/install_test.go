// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package extensionpod_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/ciliumchart"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/fixtures"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/repo"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/testenv"
)

// installGuide is the operator's guide whose checks checkAsInstallSays runs, and checksSection the section that holds
// them.
const (
	installGuide  = "docs/usage/install.md"
	checksSection = "## 5. Check it works"
)

// installChecks are the kubectl commands of the guide's checks, as an operator copies them.
func installChecks(t *testing.T) [][]string {
	t.Helper()
	top, err := repo.Root()
	if err != nil {
		t.Fatal(err)
	}
	guide, err := os.ReadFile(filepath.Join(top, installGuide))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(guide), checksSection+"\n")
	_, block, found := strings.Cut(section, "```sh\n")
	block, _, closed := strings.Cut(block, "```")
	if !ok || !found || !closed {
		t.Fatalf("%s has no sh block under %q", installGuide, checksSection)
	}
	var commands [][]string
	for line := range strings.Lines(block) {
		if args := strings.Fields(line); len(args) > 0 {
			if args[0] != "kubectl" {
				t.Fatalf("%s, %q: %q is not a kubectl step", installGuide, checksSection, line)
			}
			commands = append(commands, args[1:])
		}
	}
	return commands
}

// checkAsInstallSays runs the guide's checks with kubectl (built from the Kubernetes release of kube-apiserver) on the
// cluster in which the extension's image runs as cp-0's pod and the exposure exp has succeeded, with the agent pods of
// networking-cilium's chart (rendered) for cp-0 and worker-0 admitted and bound, and checks that each prints what the
// guide says it shows.
func checkAsInstallSays(t *testing.T, rendered *ciliumchart.Objects, exp client.Object) {
	ctx := context.Background()
	for _, node := range []string{"cp-0", "worker-0"} {
		// As the DaemonSet controller creates the pod and the scheduler binds it.
		pod := ciliumchart.DaemonSetPod(rendered.Agent, node)
		if err := env.Client.Create(ctx, pod); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), pod) })
		binding := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: pod.Name}, Target: corev1.ObjectReference{Kind: "Node", Name: node}}
		if err := env.Client.SubResource("binding").Create(ctx, pod, binding); err != nil {
			t.Fatal(err)
		}
	}
	checks := installChecks(t)
	// What each check shows, in the guide's order; rows are the fields of each line kubectl printed, the header first.
	want := []func(rows [][]string) bool{
		// The webhook configuration, with the extension's three webhooks.
		func(rows [][]string) bool {
			return len(rows) == 2 && slices.Equal(rows[1][:2], []string{testenv.WebhookConfigName, "3"})
		},
		// The extension's DaemonSet.
		func(rows [][]string) bool { return len(rows) == 2 && rows[1][0] == testenv.ServiceAccountName },
		// Cilium's pods: on cp-0 without hostAliases, on worker-0 with the control-plane nodes'.
		func(rows [][]string) bool {
			aliases := map[string]string{}
			for _, r := range rows[1:] {
				aliases[r[0]] = r[len(r)-1]
			}
			worker := strings.Split(aliases["worker-0"], ",")
			slices.Sort(worker)
			return len(rows) == 3 && aliases["cp-0"] == "<none>" && slices.Equal(worker, fixtures.ControlPlaneIPs)
		},
		// The exposure: type cilium, the VIP, Succeeded (its columns: name, type, IP, hostname, status, age).
		func(rows [][]string) bool {
			return len(rows) == 2 && rows[1][0] == exp.GetName() && slices.Contains(rows[1], "cilium") &&
				slices.Contains(rows[1], fixtures.ExposureVIP) && slices.Contains(rows[1], "Succeeded")
		},
	}
	if len(checks) != len(want) {
		t.Fatalf("%s has %d kubectl checks, the test knows %d: %v", installGuide, len(checks), len(want), checks)
	}
	for i, args := range checks {
		cmd := exec.CommandContext(ctx, testenv.KubectlPath(), args...)
		cmd.Env = append(os.Environ(), "KUBECONFIG="+env.Kubeconfig)
		out, err := cmd.CombinedOutput()
		var rows [][]string
		for line := range strings.Lines(string(out)) {
			// Every row has at least two fields: name and age, or a custom column's "<none>".
			if fields := strings.Fields(line); len(fields) >= 2 {
				rows = append(rows, fields)
			}
		}
		if err != nil || !want[i](rows) {
			t.Errorf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}
