//go:build tools

// Package tools keeps the Cilium 1.20 agent and its CLI in this wrapper module's build list, so that build.sh builds them
// straight from the module cache; nothing of Cilium's code is copied. Not the operator: it needs
// sigs.k8s.io/mcs-api/controllers, which the Go module proxy does not serve; 1.19's operator stands in.
package tools

import (
	_ "github.com/cilium/cilium/cilium-dbg"
	_ "github.com/cilium/cilium/daemon"
)
