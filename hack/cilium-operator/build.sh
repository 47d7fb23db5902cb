#!/usr/bin/env bash
# Builds Cilium's operator (LB-IPAM, BGP control plane) from the github.com/cilium/cilium module pinned in this
# folder's go.mod into a cache outside the repository; rebuilt only when missing. Prints the binary's path.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
version=$(sed -nE 's#^[[:space:]]*(require[[:space:]]+)?github.com/cilium/cilium[[:space:]]+(v[^[:space:]]+).*#\2#p' "$here/go.mod" | head -n1)
[ -n "$version" ] || { echo "cannot read the pinned cilium version from $here/go.mod" >&2; exit 1; }
cache=${CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/gardener-extension-cilium-selfhosted}
bin="$cache/cilium-operator-$version"

if [ ! -x "$bin" ]; then
  mkdir -p "$cache"
  echo ">> building cilium-operator $version into $bin (cold: about 6 minutes)" >&2
  start=$SECONDS
  # Cilium forks gobgp/v3; the checksum database does not know the fork.
  (cd "$here" && GONOSUMDB=github.com/cilium/gobgp CGO_ENABLED=0 \
    go build -mod=mod -trimpath -tags ipam_provider_operator -ldflags "-s -w" -o "$bin.tmp" github.com/cilium/cilium/operator)
  mv "$bin.tmp" "$bin"
  echo ">> built cilium-operator in $((SECONDS - start))s" >&2
fi
echo "$bin"
