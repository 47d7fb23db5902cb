// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package processmodel

import (
	"context"
	"slices"

	"sigs.k8s.io/controller-runtime/pkg/manager"

	extensionscmdcontroller "github.com/gardener/gardener/extensions/pkg/controller/cmd"
)

// Where is where a controller runs.
type Where string

const (
	// EveryReplica runs in the process's manager of every replica, leader or not, through a lost lease.
	EveryReplica Where = "every replica"
	// LeaderTerm runs in the leader's term only: one writer at a time.
	LeaderTerm Where = "leader term"
)

// Controller is one of the extension's controllers: its name, which is its switch, where it runs and how it is added.
type Controller struct {
	Name  string
	Where Where
	Add   func(context.Context, manager.Manager) error
}

// Switches are controllers as Gardener's switch options, for --controllers and --disable-controllers: each is added only
// to a manager of its kind, the process's one marked by InEveryReplica, a term's otherwise. So the switches' one
// AddToManager serves both, and every controller is listed and switched alike.
func Switches(controllers []Controller) *extensionscmdcontroller.SwitchOptions {
	switches := make([]extensionscmdcontroller.NameToAddToManagerFunc, 0, len(controllers))
	for _, c := range controllers {
		switches = append(switches, extensionscmdcontroller.Switch(c.Name, func(ctx context.Context, mgr manager.Manager) error {
			if where(mgr) != c.Where {
				return nil
			}
			if replica, ok := mgr.(everyReplica); ok {
				mgr = replica.Manager
			}
			return c.Add(ctx, mgr)
		}))
	}
	return extensionscmdcontroller.NewSwitchOptions(switches...)
}

// Enabled says whether switches turn the controller name on, by the rule of their Complete: listed by --controllers
// (all are by default) and not by --disable-controllers. For what runs of a controller before the manager exists.
func Enabled(switches *extensionscmdcontroller.SwitchOptions, name string) bool {
	return slices.Contains(switches.Enabled, name) && !slices.Contains(switches.Disabled, name)
}

// InEveryReplica marks the process's manager for the switches' AddToManager, which then adds the controllers that run
// in every replica.
func InEveryReplica(mgr manager.Manager) manager.Manager { return everyReplica{mgr} }

type everyReplica struct{ manager.Manager }

func where(mgr manager.Manager) Where {
	if _, ok := mgr.(everyReplica); ok {
		return EveryReplica
	}
	return LeaderTerm
}
