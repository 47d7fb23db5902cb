#!/usr/bin/env bash
# SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
#
# SPDX-License-Identifier: Apache-2.0

# Builds the extension's binary as its image holds it, for linux and the architecture given (default: this machine's),
# into bin/linux_<arch>/, and prints its path. The image, make build, the demo and the suites all build it here, so
# that what a node pulls is what the suites ran, compiled once.
#
# Static (CGO_ENABLED=0: a distroless static image has no libc) and reproducible: -trimpath, and the commit's time
# rather than the clock as the build date (Gardener's hack/get-build-ld-flags.sh takes the clock). The version is
# VERSION's, or EFFECTIVE_VERSION's when set (as Gardener's pipelines set it), in k8s.io/component-base/version with
# the commit and the tree state, as Gardener's binaries carry them.
set -euo pipefail
cd "$(dirname "$0")/.."

arch=${1:-$(go env GOARCH)}
out=bin/linux_$arch/gardener-extension-cilium-selfhosted

version=${EFFECTIVE_VERSION:-$(cat VERSION)}
major="" minor=""
if [[ "$version" =~ ^v([0-9]+)\.([0-9]+)(\.[0-9]+)?([-].*)?([+].*)?$ ]]; then
  major=${BASH_REMATCH[1]} minor=${BASH_REMATCH[2]}
  [ -n "${BASH_REMATCH[4]}" ] && minor+="+"
fi
commit=$(git rev-parse --verify HEAD 2>/dev/null || echo unknown)
tree=dirty
[ "$commit" != unknown ] && [ -z "$(git status --porcelain 2>/dev/null)" ] && tree=clean
date=$(TZ=UTC git log -1 --date=format-local:%Y-%m-%dT%H:%M:%SZ --format=%cd 2>/dev/null || echo 1970-01-01T00:00:00Z)

pkg=k8s.io/component-base/version
ldflags="-s -w -X $pkg.gitVersion=$version -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor -X $pkg.gitCommit=$commit"
ldflags+=" -X $pkg.gitTreeState=$tree -X $pkg.buildDate=$date -X $pkg/verflag.programName=gardener-extension-cilium-selfhosted"

CGO_ENABLED=0 GOOS=linux GOARCH=$arch go build -trimpath -ldflags "$ldflags" -o "$out" ./cmd/gardener-extension-cilium-selfhosted
echo "$out"
