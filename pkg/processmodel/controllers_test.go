// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package processmodel_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	testutils "github.com/gardener/gardener/pkg/utils/test"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/processmodel"
)

// TestSwitches: one switch set serves both kinds of controllers. The process's manager, marked InEveryReplica, gets the
// controllers of every replica, and unwrapped; a term's manager the leader term's; --disable-controllers switches a
// controller of either kind off, and --controllers' help lists them all. Enabled says of each what they did.
func TestSwitches(t *testing.T) {
	var added []string
	add := func(name string) func(context.Context, manager.Manager) error {
		return func(_ context.Context, mgr manager.Manager) error {
			if _, ok := mgr.(*testutils.FakeManager); !ok {
				t.Errorf("%s added to a %T, want the manager itself", name, mgr)
			}
			added = append(added, name)
			return nil
		}
	}
	controllers := []processmodel.Controller{
		{Name: "term-a", Where: processmodel.LeaderTerm, Add: add("term-a")},
		{Name: "term-b", Where: processmodel.LeaderTerm, Add: add("term-b")},
		{Name: "replica-a", Where: processmodel.EveryReplica, Add: add("replica-a")},
		{Name: "replica-b", Where: processmodel.EveryReplica, Add: add("replica-b")},
	}
	for _, tc := range []struct {
		args             []string
		replicas, leader []string
	}{
		{nil, []string{"replica-a", "replica-b"}, []string{"term-a", "term-b"}},
		{[]string{"--disable-controllers=replica-b,term-a"}, []string{"replica-a"}, []string{"term-b"}},
		{[]string{"--controllers=replica-a,term-a,term-b", "--disable-controllers=term-b"}, []string{"replica-a"}, []string{"term-a"}},
	} {
		switches := processmodel.Switches(controllers)
		fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
		switches.AddFlags(fs)
		for _, c := range controllers {
			// Gardener's help ends with the names as fmt prints a slice: [a b c].
			if usage := fs.Lookup("controllers").Usage; !slices.Contains(strings.Fields(strings.NewReplacer("[", " ", "]", " ").Replace(usage)), c.Name) {
				t.Errorf("--controllers' help %q does not list %s", usage, c.Name)
			}
		}
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		if err := switches.Complete(); err != nil {
			t.Fatal(err)
		}
		mgr := &testutils.FakeManager{}
		for _, c := range []struct {
			mgr  manager.Manager
			want []string
		}{{processmodel.InEveryReplica(mgr), tc.replicas}, {mgr, tc.leader}} {
			added = nil
			if err := switches.Completed().AddToManager(context.Background(), c.mgr); err != nil {
				t.Fatal(err)
			}
			slices.Sort(added)
			if !slices.Equal(added, c.want) {
				t.Errorf("%v: added %v to the %T, want %v", tc.args, added, c.mgr, c.want)
			}
		}
		for _, c := range controllers {
			if added := slices.Contains(tc.replicas, c.Name) || slices.Contains(tc.leader, c.Name); processmodel.Enabled(switches, c.Name) != added {
				t.Errorf("%v: Enabled(%s) is %t, but the switches added it: %t", tc.args, c.Name, !added, added)
			}
		}
	}
}
