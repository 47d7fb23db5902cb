#!/usr/bin/env bash
# Builds one of Cilium's binaries from the github.com/cilium/cilium module pinned in this folder's go.mod into a cache
# outside the repository; rebuilt only when missing. Prints the binary's path.
#
#   build.sh cilium-operator   the operator (LB-IPAM, BGP control plane), as in Cilium's operator-generic image
#   build.sh cilium-dbg        the agent image's CLI, whose `build-config` is the agent's `config` init container
#   build.sh cilium-agent      the agent (cold: about 7 minutes and 3 GB of memory on two cores)
set -euo pipefail

binary=${1:?usage: build.sh cilium-operator|cilium-dbg|cilium-agent}
case "$binary" in
  cilium-operator) package=github.com/cilium/cilium/operator; tags=ipam_provider_operator ;;
  cilium-dbg) package=github.com/cilium/cilium/cilium-dbg; tags= ;;
  cilium-agent) package=github.com/cilium/cilium/daemon; tags= ;;
  *) echo "unknown Cilium binary $binary" >&2; exit 1 ;;
esac

here=$(cd "$(dirname "$0")" && pwd)
version=$(sed -nE 's#^[[:space:]]*(require[[:space:]]+)?github.com/cilium/cilium[[:space:]]+(v[^[:space:]]+).*#\2#p' "$here/go.mod" | head -n1)
[ -n "$version" ] || { echo "cannot read the pinned cilium version from $here/go.mod" >&2; exit 1; }
cache=${CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/gardener-extension-cilium-selfhosted}
bin="$cache/$binary-$version"

mkdir -p "$cache"
# Suites that find no binary build it themselves, several at once under `go test ./...`: one builds, the others wait.
exec 9>"$bin.lock"
flock 9
if [ ! -x "$bin" ]; then
  echo ">> building $binary $version into $bin (cold: about 6 minutes)" >&2
  start=$SECONDS
  # Cilium forks gobgp/v3; the checksum database does not know the fork.
  (cd "$here" && GONOSUMDB=github.com/cilium/gobgp CGO_ENABLED=0 \
    go build -mod=mod -trimpath -tags "$tags" -ldflags "-s -w" -o "$bin.tmp" "$package")
  mv "$bin.tmp" "$bin"
  echo ">> built $binary in $((SECONDS - start))s" >&2
fi
echo "$bin"
