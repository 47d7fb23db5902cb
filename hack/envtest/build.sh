#!/usr/bin/env bash
# SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
#
# SPDX-License-Identifier: Apache-2.0

# Builds the envtest control plane (kube-apiserver, etcd; kube-controller-manager and kube-scheduler for the suites that
# need Kubernetes' own controllers and scheduler; kubectl for the steps of docs/usage/install.md) from Go modules into
# a cache outside the repository, because envtest binaries cannot be downloaded here and CI clones the repository
# afresh. A binary is rebuilt only when it is missing: the cache folder is named after the pinned versions, so
# changing a pin builds into a new folder.
# Prints the folder to point KUBEBUILDER_ASSETS at.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# The pinned version of a module: the one its wrapper's go.mod requires (single-line or block form).
pinned() { sed -nE "s#^[[:space:]]*(require[[:space:]]+)?$2[[:space:]]+(v[^[:space:]]+).*#\2#p" "$1/go.mod" | head -n1; }
k8s_version=$(pinned "$here/kubernetes" k8s.io/kubernetes)
etcd_version=$(pinned "$here/etcd" go.etcd.io/etcd/server/v3)
[ -n "$k8s_version" ] && [ -n "$etcd_version" ] || { echo "cannot read pinned versions from hack/envtest/*/go.mod" >&2; exit 1; }
. "$here/../lib/cache.sh"
dir="$cache/envtest-k8s-${k8s_version}-etcd-${etcd_version}"
mkdir -p "$dir"

build() { # name module-dir ldflags
  local name=$1 src=$2 ldflags=$3
  if [ -x "$dir/$name" ]; then return; fi
  echo ">> building $name into $dir (cold: several minutes)" >&2
  local start=$SECONDS
  (cd "$src" && CGO_ENABLED=0 go build -mod=mod -trimpath -ldflags "$ldflags" -o "$dir/$name.tmp" .)
  mv "$dir/$name.tmp" "$dir/$name"
  echo ">> built $name in $((SECONDS - start))s" >&2
}

build etcd "$here/etcd" "-s -w"
k8s_ldflags="-s -w -X k8s.io/component-base/version.gitVersion=${k8s_version} -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$(echo "$k8s_version" | cut -d. -f2)"
for component in kube-apiserver kube-controller-manager kube-scheduler kubectl; do
  build "$component" "$here/kubernetes/$component" "$k8s_ldflags"
done
echo "$dir"
