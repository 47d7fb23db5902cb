#!/usr/bin/env bash
# SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
#
# SPDX-License-Identifier: Apache-2.0

# Regenerates deepcopy, conversion and defaulting code of pkg/apis with the generators pinned in hack/tools.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
(cd "$root/hack/tools" && go build -o "$bin/" k8s.io/code-generator/cmd/deepcopy-gen k8s.io/code-generator/cmd/conversion-gen k8s.io/code-generator/cmd/defaulter-gen)

cd "$root"
header=hack/boilerplate.go.txt
apis=$(go list ./pkg/apis/... | grep -v -e /install -e /validation)
"$bin/deepcopy-gen" --go-header-file "$header" --output-file zz_generated.deepcopy.go $apis
"$bin/defaulter-gen" --go-header-file "$header" --output-file zz_generated.defaults.go $apis
"$bin/conversion-gen" --go-header-file "$header" --output-file zz_generated.conversion.go $apis
