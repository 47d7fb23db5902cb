# SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
#
# SPDX-License-Identifier: Apache-2.0

# gardener-extension-cilium-selfhosted
#
#   make demo   the main job: a self-hosted shoot in an embedded control plane, with the extension and Cilium's chart
#   make test   unit tests, then the integration (envtest), operator and agents suites, with the race detector; ends with
#               what it skipped, each package's time and the failures (test/README.md)

BINARY          := gardener-extension-cilium-selfhosted
GO              ?= go
ARCH            ?= $(shell $(GO) env GOARCH)
# Built tools live outside the repository (CI clones it afresh) and are reused by every checkout.
CACHE_DIR       ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/gardener-extension-cilium-selfhosted
export CACHE_DIR
ENVTEST_ASSETS   = $(shell hack/envtest/build.sh)
CILIUM_OPERATOR  = $(shell hack/cilium/build.sh cilium-operator)
CILIUM_DBG       = $(shell hack/cilium/build.sh cilium-dbg)
CILIUM_AGENT     = $(shell hack/cilium/build.sh cilium-agent)
CILIUM_CNI       = $(shell hack/cilium/build.sh cilium-cni)
# The newest Cilium line's agent, CLI, operator and CNI plugin: test/agents/datapath runs upstream's chart of it beside
# Gardener's.
CILIUM_AGENT_1_20 = $(shell hack/cilium/build.sh cilium-agent 1.20)
CILIUM_OPERATOR_1_20 = $(shell hack/cilium/build.sh cilium-operator 1.20)
CILIUM_DBG_1_20  = $(shell hack/cilium/build.sh cilium-dbg 1.20)
CILIUM_CNI_1_20  = $(shell hack/cilium/build.sh cilium-cni 1.20)
# Empty when no copy is found: each suite that renders the chart then stops with the script's line naming what to run.
NC_CHART         = $(shell hack/networking-cilium/chart.sh)
# Debian's docker-registry, unpacked into $(CACHE_DIR) (test/image/publish); empty when apt is missing.
DOCKER_REGISTRY  = $(shell hack/image/registry.sh)
# What the suites, the demo and the bench are told of the tools above.
TOOLS_ENV        = KUBEBUILDER_ASSETS="$(ENVTEST_ASSETS)" CILIUM_OPERATOR="$(CILIUM_OPERATOR)" CILIUM_DBG="$(CILIUM_DBG)" CILIUM_AGENT="$(CILIUM_AGENT)" CILIUM_CNI="$(CILIUM_CNI)" NETWORKING_CILIUM_CHART="$(NC_CHART)" DOCKER_REGISTRY="$(DOCKER_REGISTRY)"
# The tools of Cilium 1.20, for the test and bench runs that need them (ciliumbin.PathFor).
TOOLS_ENV_1_20   = CILIUM_AGENT_1_20="$(CILIUM_AGENT_1_20)" CILIUM_DBG_1_20="$(CILIUM_DBG_1_20)" CILIUM_OPERATOR_1_20="$(CILIUM_OPERATOR_1_20)" CILIUM_CNI_1_20="$(CILIUM_CNI_1_20)"
# Builds run the compiler and linker with a quarter of their garbage collections: about a fifth less CPU, a third more
# memory (docs/development/testing.md, "Cold"). What the tests run keeps Go's default.
BUILD_ENV        = GOGC=400
# Every build without the race detector takes the flags of the image's binary (hack/build.sh: static, -trimpath), so
# that the packages compile once for the binary, go vet and the agents' suites.
STATIC           = env CGO_ENABLED=0
# Test binaries without DWARF (-w; stack traces and race reports use the symbol table) link in about two thirds of
# the CPU time.
TEST_FLAGS      ?= -shuffle=on -timeout=30m -ldflags=-w
# make test runs three groups side by side (docs/development/testing.md, "How make test runs"): the unit tests and the
# suites under -race, two packages at a time each; test/agents/, whose product and Cilium run as processes of their
# own, without it (there the detector would watch the harness alone, at half of its test binary's CPU time). Each
# group keeps its test binaries in bin/test/<group>/, so that go test links only those that changed.
MODULE           = $(shell $(GO) list -m)
UNIT_PACKAGES    = $$($(GO) list ./... | grep -v "^$(MODULE)/test/")
# The suites that take longest start first and the short ones fill in after them (hack/testreport's time per package):
# listed in package order, the group ran two minutes past the others.
LONG_SUITES      = ./test/integration/apiserveraccess ./test/operator/connect ./test/integration/selfhostedshootexposure \
                   ./test/image/publish ./test/integration/rollout ./test/operator/exposure
SUITE_PACKAGES   = $$($(GO) list $(LONG_SUITES) ./test/... | grep -v "^$(MODULE)/test/agents\(/\|$$\)")
# Each -race group first runs `go build -race` of every package but the commands under one lock: the first compiles
# what both need once (two go commands side by side would each compile it), the other then finds it built, and the
# agents group, whose packages go vet compiled, runs meanwhile. The commands are left out because go build links them
# every time, which no test runs (nine -race binaries per group and run). A package that does not build is reported by
# its group.
RACE_BUILD       = $(BUILD_ENV) flock bin/test/race-build.lock $(GO) build -race $$($(GO) list -f {{.Name}}:{{.ImportPath}} ./... | grep -v ^main: | cut -d: -f2) || true;

.PHONY: all
all: lint build test

# The binary as the image holds it (static, reproducible, with VERSION's version), for this machine's architecture:
# bin/linux_<arch>/.
.PHONY: build
build:
	@$(BUILD_ENV) hack/build.sh $(ARCH) >/dev/null

# The image for linux/amd64 and linux/arm64, one index in the OCI layout bin/image/oci tagged with VERSION; prints its
# digest and sizes. Offline by default (scratch plus distroless's files); as Gardener's extensions are built with
# BASE_IMAGE=gcr.io/distroless/static-debian13:nonroot.
.PHONY: image
image:
	@$(BUILD_ENV) hack/image/build.sh

# Publishes what make image built (IMAGE_LAYOUT, default bin/image/oci): the image index to IMAGE_REPOSITORY and the
# chart, as a Helm OCI artifact naming that image by tag and digest, to CHART_REPOSITORY, both tagged with VERSION;
# prints both digests, and writes the registrations of that chart into PUSH_DIR (default bin/push): the operator
# Extension and the ControllerDeployment with the chart inlined. With IMAGE_DIGEST, only the chart, for the index
# already at IMAGE_REPOSITORY@IMAGE_DIGEST. Built with the binary's flags, so that it shares their compiled packages.
.PHONY: push
push:
	@$(BUILD_ENV) $(STATIC) $(GO) run -trimpath ./hack/image/push -layout "$(or $(IMAGE_LAYOUT),bin/image/oci)" -image-repository "$(IMAGE_REPOSITORY)" \
	  -chart-repository "$(CHART_REPOSITORY)" -image-digest "$(IMAGE_DIGEST)" -out "$(or $(PUSH_DIR),bin/push)"

# Builds the image of the commit twice, here and from a fresh clone with an empty Go build cache, and compares the
# digests (.ci/run runs it; make test does not).
.PHONY: image-verify
image-verify:
	@$(BUILD_ENV) hack/image/verify.sh

# The system packages the suites need (hack/setup.sh is their one list): installed on Debian 12 and 13 as root, else
# the exact command to run is printed. SKIP_SETUP=1 skips it.
.PHONY: setup
setup:
	@hack/setup.sh

# Gardener's networking-cilium chart at the commit hack/networking-cilium/chart.sh pins, fetched into $(CACHE_DIR) or
# found in NETWORKING_CILIUM_CHART or ../shared/reference.
.PHONY: networking-cilium-chart
networking-cilium-chart:
	@hack/networking-cilium/chart.sh >/dev/null

# kube-apiserver and etcd for envtest, built from source into $(CACHE_DIR); rebuilt only when missing or re-pinned.
.PHONY: envtest-assets
envtest-assets:
	@$(BUILD_ENV) hack/envtest/build.sh

# Cilium's real operator (LB-IPAM, BGP control plane), cilium-dbg (the agent's build-config step), the agent and its
# CNI plugin (test/agents/datapath), built from the cilium module pinned in hack/cilium.
.PHONY: cilium-binaries
cilium-binaries:
	@$(BUILD_ENV) hack/cilium/build.sh cilium-operator
	@$(BUILD_ENV) hack/cilium/build.sh cilium-dbg
	@$(BUILD_ENV) hack/cilium/build.sh cilium-agent
	@$(BUILD_ENV) hack/cilium/build.sh cilium-cni

# The agent, cilium-dbg, operator and CNI plugin of Cilium 1.20 (hack/cilium/v1.20), which test/agents/datapath runs
# from upstream's chart.
.PHONY: cilium-1.20-binaries
cilium-1.20-binaries:
	@$(BUILD_ENV) hack/cilium/build.sh cilium-dbg 1.20
	@$(BUILD_ENV) hack/cilium/build.sh cilium-agent 1.20
	@$(BUILD_ENV) hack/cilium/build.sh cilium-operator 1.20
	@$(BUILD_ENV) hack/cilium/build.sh cilium-cni 1.20

.PHONY: test
test: setup envtest-assets cilium-binaries cilium-1.20-binaries build
	@mkdir -p bin/test/agents bin/test/suites bin/test/unit
	$(TOOLS_ENV) $(TOOLS_ENV_1_20) $(GO) run ./hack/testreport \
	  $(STATIC) $(GO) test -json -trimpath $(TEST_FLAGS) -o bin/test/agents/ ./test/agents/... \; \
	  sh -c '$(RACE_BUILD) exec $(GO) test -json -race $(TEST_FLAGS) -p=2 -o bin/test/suites/ $(SUITE_PACKAGES)' \; \
	  sh -c '$(RACE_BUILD) exec $(GO) test -json -race $(TEST_FLAGS) -p=2 -o bin/test/unit/ $(UNIT_PACKAGES)'

# The tools' environment that make test passes, for running one suite or case alone: eval "$$(make -s print-test-env)"
# (test/README.md). The tools are built first when missing.
.PHONY: print-test-env
print-test-env:
	@echo 'export $(TOOLS_ENV) $(TOOLS_ENV_1_20)'

.PHONY: lint
lint:
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); \
	  if [ -n "$$unformatted" ]; then echo "gofmt would change: $$unformatted"; exit 1; fi
	@unlicensed=$$(git ls-files '*.go' '*.sh' '*.yaml' '*.tpl' Makefile Dockerfile .ci/run | xargs grep -L 'SPDX-FileCopyrightText'); \
	  if [ -n "$$unlicensed" ]; then echo "no SPDX header (hack/boilerplate.go.txt's): $$unlicensed"; exit 1; fi
	$(BUILD_ENV) $(STATIC) $(GO) vet -trimpath ./...
	$(BUILD_ENV) $(STATIC) $$(hack/staticcheck.sh) ./...

# Deepcopy, conversion and defaulting code of pkg/apis, and example/controller-registration.yaml from the chart.
.PHONY: generate
generate:
	hack/update-codegen.sh
	$(GO) run ./hack/generate-controller-registration

.PHONY: demo
demo: setup envtest-assets cilium-binaries build
	$(TOOLS_ENV) $(STATIC) $(GO) run -trimpath ./hack/demo --extension=bin/linux_$(ARCH)/$(BINARY) $(if $(KEEP),--keep) $(if $(CHART),--chart=$(CHART))

# Benchmarks of the webhook and the exposure beside their floors; results under bench/results.
.PHONY: bench
bench: setup envtest-assets cilium-binaries cilium-1.20-binaries
	$(TOOLS_ENV) $(TOOLS_ENV_1_20) $(STATIC) $(GO) run -trimpath ./hack/bench --out bench/results

# Fuzz each target for FUZZTIME; crashers land in testdata/fuzz and become regression tests of `make test`.
FUZZTIME ?= 30s
.PHONY: fuzz
fuzz:
	$(GO) test -run='^$$' -fuzz='^FuzzAdmission$$' -fuzztime=$(FUZZTIME) ./webhook/apiserveraccess
	$(GO) test -run='^$$' -fuzz='^FuzzLoad$$' -fuzztime=$(FUZZTIME) ./pkg/exposure/config
