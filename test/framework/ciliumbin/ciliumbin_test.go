// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package ciliumbin

import (
	"os"
	"regexp"
	"testing"

	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/repo"
)

// TestVersionOfTheBuiltAgent: the agent hack/cilium builds reports the Cilium version its go.mod pins, which the
// datapath harness takes the agent's BPF sources from.
func TestVersionOfTheBuiltAgent(t *testing.T) {
	agent, err := repo.Script("hack/cilium/build.sh", Agent)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Version(agent)
	if err != nil {
		t.Fatal(err)
	}
	root, err := repo.Root()
	if err != nil {
		t.Fatal(err)
	}
	goMod, err := os.ReadFile(root + "/hack/cilium/go.mod")
	if err != nil {
		t.Fatal(err)
	}
	pinned := regexp.MustCompile(`github.com/cilium/cilium v(\S+)`).FindSubmatch(goMod)
	if pinned == nil || got != string(pinned[1]) {
		t.Errorf("the agent reports Cilium %q, hack/cilium/go.mod pins %q", got, pinned)
	}
}
