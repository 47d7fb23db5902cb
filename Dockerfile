# SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
#
# SPDX-License-Identifier: Apache-2.0

# The extension's image: the static binary hack/build.sh builds (bin/linux_<arch>/, built before the image: make image)
# on Gardener's distroless static nonroot base, as Gardener's extensions ship. Without a registry (make image here),
# BASE_IMAGE=distroless-files builds it on scratch plus the files that base gives the extension (hack/image/build.sh
# gathers them into bin/image/rootfs).
ARG BASE_IMAGE=gcr.io/distroless/static-debian13:nonroot

FROM scratch AS distroless-files
COPY bin/image/rootfs/ /

FROM ${BASE_IMAGE}
ARG TARGETARCH
ARG VERSION
ARG REVISION
LABEL org.opencontainers.image.title="gardener-extension-cilium-selfhosted" \
      org.opencontainers.image.description="Gardener extension that makes Cilium safe and useful on self-hosted shoots" \
      org.opencontainers.image.source="https://github.com/gardener/gardener-extension-cilium-selfhosted" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"
COPY bin/linux_${TARGETARCH}/gardener-extension-cilium-selfhosted /gardener-extension-cilium-selfhosted
USER 65532:65532
WORKDIR /
ENTRYPOINT ["/gardener-extension-cilium-selfhosted"]
