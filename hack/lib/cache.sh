# SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
#
# SPDX-License-Identifier: Apache-2.0

# Sourced by the scripts that build or fetch a tool: $cache is the tools' cache (the Makefile's CACHE_DIR), outside the
# checkout so that a clean clone finds what an earlier run built.
cache=${CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/gardener-extension-cilium-selfhosted}

# hold_lock FILE holds an exclusive lock on FILE until the script exits: suites that find a tool missing build it
# themselves, several at once under `go test ./...`; one builds, the others wait and then find it built.
hold_lock() {
  mkdir -p "$(dirname "$1")"
  exec 9>"$1"
  flock 9
}
