//go:build tools

// Package tools keeps github.com/cilium/cilium/operator in this wrapper module's build list, so that
// `go build github.com/cilium/cilium/operator` builds Cilium's operator straight from the module cache; nothing of
// Cilium's code is copied.
package tools

import _ "github.com/cilium/cilium/operator"
