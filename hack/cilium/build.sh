#!/usr/bin/env bash
# SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
#
# SPDX-License-Identifier: Apache-2.0

# Builds one of Cilium's binaries from the github.com/cilium/cilium module pinned in this folder's go.mod (Cilium 1.19)
# or, given a Cilium line, in v<line>/go.mod (v1.20: Cilium 1.20), into a cache outside the repository; rebuilt only
# when missing. Prints the binary's path.
#
#   build.sh cilium-operator [line]   the operator (LB-IPAM, BGP control plane), as in Cilium's operator-generic image
#   build.sh cilium-dbg [line]        the agent image's CLI, whose `build-config` is the agent's `config` init container
#   build.sh cilium-agent [line]      the agent (cold: about 7 minutes and 3 GB of memory on two cores)
#   build.sh cilium-cni [line]        the CNI plugin the agent image installs on the node (plugins/cilium-cni)
set -euo pipefail

binary=${1:?usage: build.sh cilium-operator|cilium-dbg|cilium-agent|cilium-cni [1.19|1.20]}
line=${2:-}
case "$binary" in
  cilium-operator) package=github.com/cilium/cilium/operator; tags=ipam_provider_operator ;;
  cilium-dbg) package=github.com/cilium/cilium/cilium-dbg; tags= ;;
  cilium-agent) package=github.com/cilium/cilium/daemon; tags= ;;
  cilium-cni) package=github.com/cilium/cilium/plugins/cilium-cni; tags= ;;
  *) echo "unknown Cilium binary $binary" >&2; exit 1 ;;
esac

here=$(cd "$(dirname "$0")" && pwd)
dir=$here
if [ -n "$line" ] && [ -d "$here/v$line" ]; then dir=$here/v$line; fi
version=$(sed -nE 's#^[[:space:]]*(require[[:space:]]+)?github.com/cilium/cilium[[:space:]]+(v[^[:space:]]+).*#\2#p' "$dir/go.mod" | head -n1)
[ -n "$version" ] || { echo "cannot read the pinned cilium version from $dir/go.mod" >&2; exit 1; }
case "$version" in
  v"$line"*) ;;
  *) echo "no Cilium $line pinned under $here (found $version)" >&2; exit 1 ;;
esac
grep -q "\"$package\"" "$dir/tools.go" || { echo "$binary $version cannot be built here: see $dir/tools.go" >&2; exit 1; }
. "$here/../lib/cache.sh"
bin="$cache/$binary-$version"

hold_lock "$bin.lock"
if [ ! -x "$bin" ]; then
  echo ">> building $binary $version into $bin (cold: about 6 minutes)" >&2
  start=$SECONDS
  # Cilium forks gobgp/v3; the checksum database does not know the fork.
  (cd "$dir" && GONOSUMDB=github.com/cilium/gobgp CGO_ENABLED=0 \
    go build -mod=mod -trimpath -tags "$tags" -ldflags "-s -w" -o "$bin.tmp" "$package")
  mv "$bin.tmp" "$bin"
  echo ">> built $binary in $((SECONDS - start))s" >&2
fi
echo "$bin"
