#!/usr/bin/env bash
# SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
#
# SPDX-License-Identifier: Apache-2.0

# Prints the path of staticcheck at the pinned version in the tools' cache, built there first when missing (go install
# of the release's module, outside this module's build list). make lint runs it.
set -euo pipefail
version=v0.8.2
. "$(dirname "$0")/lib/cache.sh"
bin=$cache/staticcheck-$version
hold_lock "$bin.lock"
if [ ! -x "$bin" ]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  GOBIN="$tmp" GOFLAGS=-trimpath CGO_ENABLED=0 go install "honnef.co/go/tools/cmd/staticcheck@$version" >&2
  mv "$tmp/staticcheck" "$bin"
  echo ">> staticcheck: built $version into $bin" >&2
fi
echo "$bin"
