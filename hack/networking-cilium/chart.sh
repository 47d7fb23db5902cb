#!/usr/bin/env bash
# SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
#
# SPDX-License-Identifier: Apache-2.0

# Finds Gardener's networking-cilium chart (charts/internal/cilium of gardener/gardener-extension-networking-cilium,
# which the Go module proxy does not serve) at the pinned commit, and prints its directory. Tried in this order:
#   1. $NETWORKING_CILIUM_CHART, a chart directory the user chose, which wins over anything found;
#   2. the copy an earlier run put into the tool cache;
#   3. a fetch of the pinned commit from $NETWORKING_CILIUM_REPO (default: GitHub over https) into the tool cache, with
#      the chart, the API types and the value computation the tests follow, and the license;
#   4. ../shared/reference/networking-cilium beside this repository or one of its ancestors, copied into the tool cache
#      so that later runs do not try the network again.
# Whichever it is must hold exactly the pinned chart: its git tree hash, computed offline from the files, is compared
# with the pin. The chosen copy is named on stderr; when there is none, the last line says what to run.
set -euo pipefail

# The pinned commit and the git tree hash of its charts/internal/cilium (`git rev-parse COMMIT:charts/internal/cilium`).
# Bumping the pin is this one line; test/framework/ciliumchart.GardenerVersion follows the Cilium release of its image vector.
pin="7fbb714fe48c2cc767d212a7a8d2e14881202ea1 eac701723eee4aeb7fb66b051ea9debe399c5863"

read -r pinned_commit pinned_tree <<<"$pin"
repo=${NETWORKING_CILIUM_REPO:-https://github.com/gardener/gardener-extension-networking-cilium.git}
# A stand-in repository (a test's file URL) has its own commit of the same tree.
commit=${NETWORKING_CILIUM_COMMIT:-$pinned_commit}
timeout=${NETWORKING_CILIUM_FETCH_TIMEOUT:-30}
chart_path=charts/internal/cilium
# What the tests read besides the chart: the NetworkConfig API and how networking-cilium computes the chart's values.
fetched_paths=("$chart_path" pkg/apis/cilium/v1alpha1/types_network.go pkg/charts/utils.go pkg/charts/values.go LICENSE)

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
. "$here/../lib/cache.sh"
cached="$cache/networking-cilium-$commit"
remedy="run hack/networking-cilium/chart.sh where $repo is reachable (it caches the chart in $cache), or set NETWORKING_CILIUM_CHART to charts/internal/cilium of a checkout of commit $pinned_commit"

# Run from a git hook or another repository's command, git's environment would point the commands below elsewhere.
# shellcheck disable=SC2046
unset $(git rev-parse --local-env-vars)

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# tree_of DIR: the git tree hash of DIR's files as a commit of them would record it.
tree_of() {
  local git="$tmp/tree-$RANDOM"
  git init -q --bare "$git" || return 1
  git --git-dir="$git" --work-tree="$1" add -A -f . >/dev/null || return 1
  git --git-dir="$git" write-tree
}

# use DIR SOURCE: prints DIR when it holds the pinned chart, else says why not and fails.
use() {
  local tree
  if [ ! -f "$1/Chart.yaml" ]; then
    echo "networking-cilium's chart: $2 $1 has no Chart.yaml" >&2
    return 1
  fi
  if ! tree=$(tree_of "$1"); then
    echo "networking-cilium's chart: $2 $1 cannot be read" >&2
    return 1
  fi
  if [ "$tree" != "$pinned_tree" ]; then
    echo "networking-cilium's chart: $2 $1 is not the pinned chart: its git tree is $tree, the pin in hack/networking-cilium/chart.sh $pinned_tree" >&2
    return 1
  fi
  echo ">> networking-cilium's chart: $1 ($2, tree $tree as pinned)" >&2
  echo "$1"
}

# keep STAGED SOURCE: moves the staged copy into the cache unless another run got there first; fails when the cache
# cannot be written, which only costs the cache.
keep() {
  echo "$2" >"$1/.complete"
  mkdir -p "$cache" 2>/dev/null || return 1
  local stage
  stage=$(mktemp -d "$cache/.networking-cilium.XXXXXX" 2>/dev/null) || return 1
  # Writable, so that a later run can replace it; git's tree hash records only the executable bit.
  cp -R "$1/." "$stage/" && chmod -R u+w "$stage" && chmod 755 "$stage" || { rm -rf "$stage"; return 1; }
  # A rename fails when the target exists: then the other run's copy stays, and is the same tree.
  mv -T "$stage" "$cached" 2>/dev/null || rm -rf "$stage"
  [ -f "$cached/.complete" ]
}

if [ -n "${NETWORKING_CILIUM_CHART:-}" ]; then
  use "$NETWORKING_CILIUM_CHART" "NETWORKING_CILIUM_CHART" || exit 1
  exit 0
fi

if [ -f "$cached/.complete" ]; then
  use "$cached/$chart_path" "cached, $(cat "$cached/.complete")" && exit 0
  echo ">> networking-cilium's chart: removing the cached copy, which does not verify" >&2
  rm -rf "$cached"
fi

fetch_error=""
echo ">> fetching networking-cilium $commit from $repo (at most ${timeout}s)" >&2
git init -q "$tmp/repo"
if GIT_TERMINAL_PROMPT=0 timeout "$timeout" git -C "$tmp/repo" -c protocol.file.allow=always \
  fetch -q --depth 1 "$repo" "$commit" 2>"$tmp/fetch.log"; then
  tree=$(git -C "$tmp/repo" rev-parse "FETCH_HEAD:$chart_path" 2>/dev/null || true)
  if [ "$tree" = "$pinned_tree" ]; then
    mkdir -p "$tmp/copy"
    git -C "$tmp/repo" archive FETCH_HEAD -- "${fetched_paths[@]}" | tar -x -C "$tmp/copy"
    if keep "$tmp/copy" "fetched from $repo"; then
      use "$cached/$chart_path" "fetched from $repo" && exit 0
    else
      echo ">> networking-cilium's chart: cannot write $cache; using the fetched copy once" >&2
      use "$tmp/copy/$chart_path" "fetched from $repo" >/dev/null && trap - EXIT && echo "$tmp/copy/$chart_path" && exit 0
    fi
    fetch_error="the fetched copy does not verify"
  else
    fetch_error="$commit of $repo has ${tree:-no $chart_path} as $chart_path, the pin $pinned_tree"
  fi
else
  rc=$?
  [ $rc = 124 ] && fetch_error="no answer from $repo within ${timeout}s" || fetch_error=$(grep -m1 '^fatal:' "$tmp/fetch.log" || head -n1 "$tmp/fetch.log")
fi
echo ">> networking-cilium's chart: fetch failed: $fetch_error" >&2

dir=$root
while [ "$dir" != / ]; do
  reference="$(dirname "$dir")/shared/reference/networking-cilium"
  if [ -f "$reference/$chart_path/Chart.yaml" ]; then
    source="the reference copy $reference"
    if use "$reference/$chart_path" "$source" >/dev/null; then
      mkdir -p "$tmp/reference"
      (cd "$reference" && cp -a --parents "${fetched_paths[@]}" "$tmp/reference/") 2>/dev/null || cp -a "$reference/." "$tmp/reference/"
      if keep "$tmp/reference" "copied from $source"; then
        use "$cached/$chart_path" "copied from $source" && exit 0
      fi
      echo "$reference/$chart_path"
      exit 0
    fi
  fi
  dir=$(dirname "$dir")
done

echo "networking-cilium's chart is missing: the fetch failed ($fetch_error) and there is no ../shared/reference/networking-cilium; $remedy" >&2
exit 1
