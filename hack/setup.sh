#!/usr/bin/env bash
# SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
#
# SPDX-License-Identifier: Apache-2.0

# Sets this machine up for `make test`, `make demo` and `make bench` (and `.ci/run`, which calls it): installs the
# system packages the suites need that are missing. This is the one list of them.
#
# Supported: Debian 12 (bookworm; what these machines and CI run) and Debian 13 (trixie; the same package names).
# There, as root, it installs what is missing and says what; without root it stops with the exact command to run.
# Elsewhere it checks for the programs and stops with what to install. SKIP_SETUP=1 skips it: suites that then lack a
# program stop with one line naming it, and `make test` lists them at the end.
set -euo pipefail

# package  program the suites run (to check on systems without dpkg)  who needs it
packages=(
  "make            make                          the README's commands"
  "iproute2        ip                            network namespaces: the nodes and pods of test/operator/connect and test/agents/datapath"
  "util-linux      unshare                       mount and cgroup namespaces of the pods those suites run"
  "iptables        iptables                      the agents' rules, and the counters of what the nodes dial"
  "iputils-arping  arping                        who answers ARP for the VIP"
  "clang-19        /usr/lib/llvm-19/bin/clang    the agents compile their BPF programs (Cilium needs LLVM >= 18.1; bookworm's default is 14)"
  "llvm-19         /usr/lib/llvm-19/bin/llc      ditto"
  "frr             /usr/lib/frr/bgpd             the BGP router of test/agents/datapath (zebra and bgpd, each run in namespaces of its own; the package's service never runs)"
  "buildah         buildah                       make image: the extension's image from the Dockerfile, without a Docker daemon"
  "skopeo          skopeo                        images and charts between OCI layouts and registries (for make push, issue 42)"
  "podman          podman                        runs the image as a node would (for the image suite, issue 42)"
  "runc            runc                          podman's runtime here (crun, its default, fails on a cgroup v1/v2 hybrid)"
)

[ "${SKIP_SETUP:-}" = 1 ] && exit 0

os_id="" os_version="" os_name="this system"
if [ -r /etc/os-release ]; then
  # shellcheck disable=SC1091
  os_id=$(. /etc/os-release && echo "${ID:-}")
  os_version=$(. /etc/os-release && echo "${VERSION_ID:-}")
  os_name=$(. /etc/os-release && echo "${PRETTY_NAME:-$ID}")
fi

missing=()
for entry in "${packages[@]}"; do
  read -r package program _ <<<"$entry"
  if [ "$os_id" = debian ] && command -v dpkg-query >/dev/null; then
    status=$(dpkg-query -W -f='${Status}' "$package" 2>/dev/null || true)
    case "$status" in *" ok installed") ;; *) missing+=("$package") ;; esac
  elif ! command -v "$program" >/dev/null; then
    missing+=("$package ($program)")
  fi
done
# Debian's docker-registry is unpacked into the tools' cache, not installed: its package would start a registry
# service on this machine (hack/image/registry.sh; test/image/publish).
unpack_registry() {
  if [ "$os_id" = debian ]; then "$(dirname "$0")/image/registry.sh" >/dev/null; fi
}
if [ ${#missing[@]} -eq 0 ]; then
  unpack_registry
  exit 0
fi

case "$os_id $os_version" in
  "debian 12" | "debian 13") ;;
  *)
    echo "setup: hack/setup.sh installs packages on Debian 12 and 13 only; on $os_name install these (Debian's names, with the program the suites run):" >&2
    printf '  %s\n' "${missing[@]}" >&2
    echo "then run the command again, or run it with SKIP_SETUP=1 to skip the suites that need them" >&2
    exit 1
    ;;
esac

if [ "$(id -u)" != 0 ]; then
  echo "setup: missing Debian packages: ${missing[*]}; run:" >&2
  echo "  sudo apt-get update && sudo apt-get install -y --no-install-recommends ${missing[*]}" >&2
  echo "then run the command again (the suites that run Cilium need root too), or run it with SKIP_SETUP=1" >&2
  exit 1
fi

echo ">> setup: installing the Debian packages the suites need: ${missing[*]}" >&2
# No package's service may start: frr's would run a router in this machine's own network namespace. invoke-rc.d and
# deb-systemd-invoke ask policy-rc.d first; 101 is "action forbidden" (Debian's invoke-rc.d(8)).
policy=/usr/sbin/policy-rc.d saved=""
if [ -e "$policy" ]; then saved=$(mktemp) && cp -p "$policy" "$saved"; fi
trap 'if [ -n "$saved" ]; then mv "$saved" "$policy"; else rm -f "$policy"; fi' EXIT
printf '#!/bin/sh\n# hack/setup.sh: no service starts while it installs packages\nexit 101\n' >"$policy"
chmod 755 "$policy"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >&2
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
# Nor at the next boot.
if printf '%s\n' "${missing[@]}" | grep -qx frr; then
  if [ -d /run/systemd/system ]; then systemctl disable --quiet frr.service || true; else update-rc.d frr disable >/dev/null 2>&1 || true; fi
fi
echo ">> setup: installed ${missing[*]}" >&2
unpack_registry
