#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# Usage: hack/build-then.sh LOCK BUILD_COMMAND... -- COMMAND...
#
# Runs BUILD_COMMAND holding LOCK, then COMMAND. make test gives both -race groups the same build: the first to take
# the lock compiles what they share while the agents group already runs, the other then finds it in the build cache
# (two go commands side by side would each compile it). A package that does not build is reported by COMMAND.
set -uo pipefail
lock=$1
shift
build=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  build+=("$1")
  shift
done
shift
mkdir -p "$(dirname "$lock")"
flock "$lock" "${build[@]}" >&2
exec "$@"
