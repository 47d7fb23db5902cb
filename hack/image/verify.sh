#!/usr/bin/env bash
# SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
#
# SPDX-License-Identifier: Apache-2.0

# Checks that the image is reproducible: builds the commit's image here (hack/image/build.sh), then again from a fresh
# clone at another path with an empty Go build cache, and compares the two index digests.
set -euo pipefail
cd "$(dirname "$0")/../.."

if [ -n "$(git status --porcelain)" ]; then
  echo "image-verify: the tree has changes; it builds the commit twice, so commit or stash them first" >&2
  exit 1
fi
# Passes the build's report on to stderr and keeps the index digest. Not `tee /dev/stderr`: where stderr is a file,
# tee opens it anew and truncates it, and with it the log of whatever ran before (.ci/run > file).
digest() {
  local report
  report=$(cat)
  echo "$report" >&2
  echo "$report" | grep '^index ' | cut -d' ' -f2
}

first=$(hack/image/build.sh | digest)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
git clone -q --no-hardlinks . "$tmp/clone"
second=$(cd "$tmp/clone" && GOCACHE="$tmp/gocache" hack/image/build.sh | digest)
echo "image-verify: $first here, $second from $tmp/clone with an empty build cache"
if [ "$first" != "$second" ]; then
  echo "image-verify: the digests differ: the image is not reproducible" >&2
  exit 1
fi
