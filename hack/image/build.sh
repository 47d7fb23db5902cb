#!/usr/bin/env bash
# SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
#
# SPDX-License-Identifier: Apache-2.0

# Builds the extension's image from the Dockerfile for each platform of PLATFORMS (default linux/amd64,linux/arm64)
# into one index, writes it to the OCI layout IMAGE_LAYOUT (default bin/image/oci) under the tag of VERSION, and prints the index's digest
# and each image's size. Offline by default: BASE_IMAGE=distroless-files, scratch plus the files Gardener's distroless
# static nonroot base gives the extension (its passwd and group with uid 65532, nsswitch.conf, /tmp, and this
# machine's CA bundle); BASE_IMAGE=gcr.io/distroless/static-debian13:nonroot builds it as Gardener's extensions are
# built, where that registry is reachable.
#
# Reproducible: the binaries of hack/build.sh, the commit's time as every timestamp, no build host in the labels, no
# history: the same commit gives the same digest from any checkout (make image-verify).
set -euo pipefail
cd "$(dirname "$0")/../.."

if ! command -v buildah >/dev/null; then
  echo "image: buildah is missing: install Debian's buildah (make setup)" >&2
  exit 1
fi

version=$(cat VERSION)
base=${BASE_IMAGE:-distroless-files}
platforms=${PLATFORMS:-linux/amd64,linux/arm64}
name=localhost/gardener-extension-cilium-selfhosted:$version
layout=${IMAGE_LAYOUT:-bin/image/oci}

# One build at a time per checkout: the rootfs below is the build context's, and suites build side by side.
. hack/lib/cache.sh
hold_lock bin/image/.lock

for platform in ${platforms//,/ }; do
  hack/build.sh "${platform#linux/}" >/dev/null
done

# The Dockerfile's distroless-files stage copies bin/image/rootfs; with another base it is not built.
rootfs=bin/image/rootfs
rm -rf "$rootfs"
mkdir -p "$rootfs/etc/ssl/certs" "$rootfs/tmp"
cp hack/image/rootfs/etc/* "$rootfs/etc/"
cp /etc/ssl/certs/ca-certificates.crt "$rootfs/etc/ssl/certs/"
chmod 0644 "$rootfs"/etc/* "$rootfs/etc/ssl/certs/ca-certificates.crt"
chmod 1777 "$rootfs/tmp"

buildah manifest rm "$name" >/dev/null 2>&1 || true
# One platform after the other: given several, buildah builds them side by side and adds each to the index as it
# finishes, so the index's order, and with it its digest, changed from build to build.
revision=$(git rev-parse HEAD)
committed=$(git log -1 --format=%ct)
for platform in ${platforms//,/ }; do
  buildah build --quiet --manifest "$name" --platform "$platform" \
    --build-arg BASE_IMAGE="$base" --build-arg VERSION="$version" --build-arg REVISION="$revision" \
    --timestamp "$committed" --identity-label=false --omit-history \
    --file Dockerfile . >/dev/null
done

rm -rf "$layout"
buildah manifest push --quiet --all "$name" "oci:$layout:$version" >/dev/null
echo "image $name (OCI layout $layout, tag $version)"
go run ./hack/image/info "$layout" "$version"
