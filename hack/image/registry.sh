#!/usr/bin/env bash
# SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
#
# SPDX-License-Identifier: Apache-2.0

# Prints the path of Debian's docker-registry binary (the CNCF distribution registry, v2) in the tools' cache, unpacked
# there first when missing: apt-get download and dpkg -x, so that no package is installed and no service starts. The
# registry suite runs it on 127.0.0.1 with a configuration of its own (test/framework/registry).
set -euo pipefail
. "$(dirname "$0")/../lib/cache.sh"

if ! command -v apt-get >/dev/null || ! command -v dpkg >/dev/null; then
  echo "registry: apt-get and dpkg are missing: Debian's docker-registry is unpacked with them" >&2
  exit 1
fi
version=$(apt-cache show --no-all-versions docker-registry 2>/dev/null | sed -n 's/^Version: //p' | head -1)
if [ -z "$version" ]; then
  apt-get update -qq >&2
  version=$(apt-cache show --no-all-versions docker-registry | sed -n 's/^Version: //p' | head -1)
fi
dir=$cache/docker-registry-${version//[^A-Za-z0-9.+-]/_}
bin=$dir/usr/bin/docker-registry
hold_lock "$dir.lock"
if [ ! -x "$bin" ]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  (cd "$tmp" && apt-get download -q "docker-registry=$version" >&2)
  mkdir -p "$tmp/root"
  dpkg -x "$tmp"/docker-registry_*.deb "$tmp/root"
  rm -rf "$dir"
  mv "$tmp/root" "$dir"
  echo ">> registry: unpacked Debian's docker-registry $version into $dir" >&2
fi
echo "$bin"
