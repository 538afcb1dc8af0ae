# meshgate: build, run, test and lint. GNU make. `make help` lists the targets.
#
# Swift is taken from PATH, else from /opt/swift; override with `make SWIFT=/path/to/swift`.
# The Debian packages are listed in Docker/packages-*.txt and installed by scripts/install-deps.sh when
# missing (set MESHGATE_SKIP_DEPS=1 to skip that): packages-build.txt for building (shared with the
# Dockerfile), plus packages-run.txt for `make run`, plus packages-test.txt for the tests.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help
MAKEFLAGS += --no-print-directory

SWIFT ?= $(shell command -v swift 2>/dev/null || echo /opt/swift/usr/bin/swift)

# When swift is given as an absolute path, put its directory first on PATH for every recipe,
# so the whole toolchain (swift-build, swift-format, clang, ...) is found even if PATH lacks it.
SWIFT_BIN_DIR := $(patsubst %/,%,$(dir $(filter /%,$(firstword $(SWIFT)))))
ifneq ($(SWIFT_BIN_DIR),)
export PATH := $(SWIFT_BIN_DIR):$(PATH)
endif

# Extra arguments: `make run RUN_ARGS="--port 9000 --name lab"`,
# `make test TEST_ARGS="--filter StoreTests"`, `make build BUILD_ARGS="-j 4"`.
RUN_ARGS ?=
TEST_ARGS ?=
# Bounded fuzzing and API-schema testing inside `make test`; `make fuzz` / `make schemathesis` run longer.
FUZZ_TEST_SECONDS ?= 10
FUZZ_SECONDS ?= 300
# 8 examples per operation: 3m46s-4m04s (about 1 950 requests) with a debug build on a loaded 2-core machine
# (5: 3m11s, 10: 4m25s); the whole CI run must stay well under 45 minutes.
SCHEMATHESIS_TEST_EXAMPLES ?= 8
BUILD_ARGS ?=
# Where the release timing test's nodes keep their data: tmpfs when the machine has one (see timing-tests).
TIMING_TMPDIR ?= $(shell [[ -d /dev/shm && -w /dev/shm ]] && echo /dev/shm || echo "$${TMPDIR:-/tmp}")
export RUN_ARGS

LINT_PATHS := Sources Tests Package.swift Fuzz

# `make install` / `make uninstall` (docs/operations.md): PREFIX for the binary, dashboard and man page, DESTDIR to
# stage into another root (packaging). The unit goes to UNITDIR; the settings file is /etc/default/meshgate.
PREFIX ?= /usr/local
DESTDIR ?=
BINDIR ?= $(PREFIX)/bin
SHAREDIR ?= $(PREFIX)/share/meshgate
MANDIR ?= $(PREFIX)/share/man/man1
UNITDIR ?= $(PREFIX)/lib/systemd/system
SYSCONFDIR ?= /etc
# The installed binary links the Swift runtime statically (as the Docker image's does), so it runs without a Swift
# toolchain; it is built in a scratch directory of its own so that `make build` and `make install` do not rebuild
# each other's objects.
INSTALL_SCRATCH ?= .build/static
INSTALL_BINARY ?= $(INSTALL_SCRATCH)/release/meshgate

# Suites that move tens of MiB, open hundreds of sockets or time CPU work. `make test` runs each on its own after
# the others (which run in parallel): on a 2-core machine, running them beside 600 other tests starves the test
# process itself (its polling and kill -9 steps come many seconds late), which is noise, not a finding.
# GatewayTests.InProcessNodeTests needs under a second alone, but every step of it waits for a thread of Swift's
# shared pool (two here), which the parallel run's integration tests hold in blocking socket reads for about a
# minute: it finished after 60-62 s in most parallel runs, and two of eight failed its one-minute limit.
# DiscoveryTests.BeaconTests is the same case (each step polls on the shared pool): its stop test passed after
# 37-75 s in parallel runs and failed its limit once (107 s, machine loaded), against about 2 s alone.
# LWSTests.LoopTimerTests and GatewayTests.EventJournalNodeTests too: each awaits a node or a loop timer and resumes
# on the shared pool; on a fresh clone with the machine loaded (load ~12) four of their tests ran past their one-minute
# limit in the parallel run (110-130 s), against under two seconds alone.
BULK_SUITES := IntegrationTests.TransferTests IntegrationTests.StreamTests IntegrationTests.BackpressureTests \
  IntegrationTests.ConnectionLimitTests IntegrationTests.HostileNodeTests IntegrationTests.SurfaceGuardTests \
  IntegrationTests.NodeProcessTests MeshCoreTests.JSONParserCostTests \
  IntegrationTests.GroupSendTests IntegrationTests.GroupSendBulkTests GatewayTests.InProcessNodeTests \
  DiscoveryTests.BeaconTests LWSTests.LoopTimerTests GatewayTests.EventJournalNodeTests
BULK_SUITES_REGEX := $(subst $(eval) ,|,$(foreach suite,$(BULK_SUITES),$(suite)/))
# The tests that start meshgate processes and wait on them in blocking socket reads, holding a thread of Swift's
# shared pool (two threads on two cores) for as long as they run: they run in a parallel phase of their own, after
# the unit and in-process tests, whose every await needs a thread of that pool. Run together, a fresh clone on a
# loaded machine (load ~19) saw five in-process tests (node info, query parameters, presence) pass their one-minute
# limit waiting for a thread, each under two seconds alone.
PROCESS_TESTS_REGEX := IntegrationTests\.

# Browser tests (Tests/Browser): Python + selenium in a virtual environment (Debian's python3 is
# "externally managed", PEP 668), driving Debian's chromium through chromium-driver.
PYTHON ?= python3
BROWSER_VENV := .build/browser-venv
BROWSER_REQUIREMENTS := Tests/Browser/requirements.txt
BROWSER_ARTIFACTS ?= .build/test-artifacts/browser
BROWSER_ARGS ?=
# Network fault suite (Tests/Netns, Python stdlib): five nodes in network namespaces; needs root.
NETNS_ARGS ?=

step = @printf '\n==> %s\n' "$(1)"
# Every test step runs under a bound in minutes (scripts/bounded.sh), far above its usual time: a test that hangs
# fails its step with a message instead of holding the run until CI's own limit ends it.
BOUNDED := bash scripts/bounded.sh

DEPS_BUILD := Docker/packages-build.txt
DEPS_RUN := $(DEPS_BUILD) Docker/packages-run.txt
DEPS_TEST := $(DEPS_BUILD) Docker/packages-test.txt

.PHONY: help deps deps-run deps-test swift-check build build-debug run test timing-tests test-browser browser-tests test-netns \
  netns-tests lint format bench clean fuzz schemathesis docker-test docker-clean install install-files static-binary uninstall deb \
  check-docs check-unit

help: ## Show this help
	@echo "meshgate make targets:"
	@grep -E '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) \
	  | awk 'BEGIN {FS = ":.*## "} {printf "  %-12s %s\n", $$1, $$2}'
	@echo
	@echo "Variables: SWIFT=$(SWIFT)"
	@echo "           RUN_ARGS, TEST_ARGS, BUILD_ARGS, BROWSER_ARGS (e.g. \"-k chat\"), MESHGATE_SKIP_DEPS=1,"
	@echo "           NETNS_ARGS (e.g. \"--only partition\"), MESHGATE_SKIP_BROWSER_TESTS=1, MESHGATE_SKIP_NETNS_TESTS=1,"
	@echo "           MESHGATE_DOCKER_ENGINE=docker|podman, MESHGATE_DOCKER_PULL=0,"
	@echo "           PREFIX=/usr/local, DESTDIR= (install, uninstall), MESHGATE_* (docs/configuration.md)"

deps: ## Install the missing Debian packages for building (Docker/packages-build.txt)
	@bash scripts/install-deps.sh $(DEPS_BUILD)

deps-run:
	@bash scripts/install-deps.sh $(DEPS_RUN)

deps-test: ## Install the missing Debian packages for building and testing (+ Docker/packages-test.txt)
	@bash scripts/install-deps.sh $(DEPS_TEST)

swift-check:
	@if ! command -v "$(firstword $(SWIFT))" >/dev/null 2>&1; then \
	  echo "error: swift not found (looked on PATH and at /opt/swift/usr/bin/swift)." >&2; \
	  echo "       Install Swift 6.1 or newer, or run: make $(MAKECMDGOALS) SWIFT=/path/to/swift" >&2; \
	  exit 1; \
	fi

build: deps swift-check ## Build the release binary (.build/release/meshgate)
	$(call step,swift build -c release)
	@$(SWIFT) build -c release $(BUILD_ARGS)

build-debug: deps swift-check ## Build the debug binary (.build/debug/meshgate)
	$(call step,swift build)
	@$(SWIFT) build $(BUILD_ARGS)

run: deps-run swift-check ## Build, start a node, create a first peer and print how to use it
	$(call step,swift build -c release)
	@$(SWIFT) build -c release $(BUILD_ARGS)
	@bash scripts/run.sh

test: deps-test swift-check ## Build the debug binary and run all tests (Swift, browser, network faults, links, unit, fuzz, schemathesis)
	$(call step,swift build --build-tests (debug; integration tests launch .build/debug/meshgate))
	@$(SWIFT) build --build-tests $(BUILD_ARGS)
	@if [[ -n "$(strip $(TEST_ARGS))" ]]; then \
	  printf '\n==> %s\n' "swift test $(TEST_ARGS)"; \
	  $(SWIFT) test $(BUILD_ARGS) $(TEST_ARGS); \
	else \
	  printf '\n==> %s\n' "swift test (unit and in-process tests, in parallel)"; \
	  $(BOUNDED) 15 "the unit and in-process tests" \
	    $(SWIFT) test $(BUILD_ARGS) --skip-build --skip '$(BULK_SUITES_REGEX)|$(PROCESS_TESTS_REGEX)'; \
	  printf '\n==> %s\n' "swift test (integration tests against node processes, in parallel)"; \
	  $(BOUNDED) 20 "the integration tests" \
	    $(SWIFT) test $(BUILD_ARGS) --skip-build --filter '$(PROCESS_TESTS_REGEX)' --skip '$(BULK_SUITES_REGEX)'; \
	  for suite in $(BULK_SUITES); do \
	    printf '\n==> %s\n' "swift test --filter $$suite (a bulk suite, on its own)"; \
	    $(BOUNDED) 10 "$$suite" $(SWIFT) test $(BUILD_ARGS) --skip-build --filter "$$suite/"; \
	  done; \
	  $(MAKE) timing-tests; \
	fi
	@if [[ "$${MESHGATE_SKIP_BROWSER_TESTS:-0}" == 1 ]]; then \
	  echo "MESHGATE_SKIP_BROWSER_TESTS=1: not running the browser tests"; \
	else \
	  $(MAKE) browser-tests; \
	fi
	@if [[ "$${MESHGATE_SKIP_NETNS_TESTS:-0}" == 1 ]]; then \
	  echo "MESHGATE_SKIP_NETNS_TESTS=1: not running the network fault suite"; \
	else \
	  $(MAKE) netns-tests; \
	fi
	@$(MAKE) check-docs
	@INSTALL_BINARY="$$($(SWIFT) build $(BUILD_ARGS) --show-bin-path)/meshgate" $(MAKE) check-unit
	$(call step,fuzz: $(FUZZ_TEST_SECONDS)s per decoder (make fuzz runs longer))
	@SWIFT=$(SWIFT) bash scripts/fuzz.sh $(FUZZ_TEST_SECONDS)
	$(call step,schemathesis: $(SCHEMATHESIS_TEST_EXAMPLES) examples per operation)
	@bash scripts/schemathesis.sh $(SCHEMATHESIS_TEST_EXAMPLES)

# Latency bounds only mean something with optimised nodes: builds the release binary and runs the timing tests
# against it (the test process itself stays the debug build).
timing-tests:
	$(call step,timing tests against release-built nodes (a small message beside a 24 MiB burst: p99 < 100 ms))
	@$(SWIFT) build -c release $(BUILD_ARGS) --product meshgate
	@# The bulk suites before this write gigabytes; flush what is still dirty so the nodes' disk writes do not queue
	@# behind that writeback while latency is measured.
	@sync
	@# The nodes' data directories go to tmpfs (TIMING_TMPDIR) when there is one: the bound is about the link's and the
	@# event log's order, and on this machine's disk the file system's own stalls under the burst's writes moved the
	@# p99 by 30-70 ms between runs (docs/performance.md, "A small message beside a bulk burst"). TIMING_TMPDIR= keeps them on disk.
	@MESHGATE_BINARY="$$($(SWIFT) build -c release $(BUILD_ARGS) --show-bin-path)/meshgate" MESHGATE_STRICT_TIMING=1 \
	  TMPDIR="$(TIMING_TMPDIR)" $(BOUNDED) 10 "the timing tests" \
	  $(SWIFT) test $(BUILD_ARGS) --skip-build --filter 'BackpressureTests/aBurstOfReliableData'

test-browser: deps-test swift-check ## Build the debug binary and run the browser tests (headless Chromium)
	$(call step,swift build (debug; the browser tests launch it))
	@$(SWIFT) build $(BUILD_ARGS)
	@$(MAKE) browser-tests

test-netns: deps-test swift-check ## Build the debug binary and run only the network fault suite (root; NETNS_ARGS="--only loss")
	$(call step,swift build (debug; the fault suite launches it))
	@$(SWIFT) build $(BUILD_ARGS)
	@$(MAKE) netns-tests

# Runs the fault suite against the already built debug binary (used by test and test-netns). Without root or
# `ip netns` it prints why and is skipped (under CI=true that is a failure: MESHGATE_REQUIRE_NETNS=0 allows it).
netns-tests:
	$(call step,network fault suite (Tests/Netns: 5 nodes in network namespaces, ~4 min; figures in .build/test-artifacts/netns))
	@MESHGATE_BINARY="$$($(SWIFT) build $(BUILD_ARGS) --show-bin-path)/meshgate" \
	  MESHGATE_PUBLIC_DIR="$(CURDIR)/Public" \
	  $(BOUNDED) 20 "the network fault suite" $(PYTHON) Tests/Netns/run.py $(NETNS_ARGS)

# The virtual environment is rebuilt whenever the pinned requirements change.
$(BROWSER_VENV)/.installed: $(BROWSER_REQUIREMENTS)
	$(call step,python venv $(BROWSER_VENV) with $(BROWSER_REQUIREMENTS))
	@$(PYTHON) -m venv --clear $(BROWSER_VENV) || { \
	  echo "error: '$(PYTHON) -m venv' failed; on Debian install python3-venv (make deps-test does)." >&2; exit 1; }
	@$(BROWSER_VENV)/bin/pip install --disable-pip-version-check -q -r $(BROWSER_REQUIREMENTS)
	@touch $@

# Runs the browser tests against the already built debug binary (used by test and test-browser).
browser-tests: $(BROWSER_VENV)/.installed
	$(call step,browser tests (Tests/Browser; screenshots in $(BROWSER_ARTIFACTS)))
	@MESHGATE_BINARY="$$($(SWIFT) build $(BUILD_ARGS) --show-bin-path)/meshgate" \
	  MESHGATE_PUBLIC_DIR="$(CURDIR)/Public" \
	  MESHGATE_BROWSER_ARTIFACTS="$(BROWSER_ARTIFACTS)" \
	  $(BOUNDED) 25 "the browser tests" $(BROWSER_VENV)/bin/python Tests/Browser/run.py $(BROWSER_ARGS)

fuzz: deps-test swift-check ## Fuzz the mesh frame, chat frame and JSON request decoders (FUZZ_SECONDS per decoder, default 300)
	@SWIFT=$(SWIFT) bash scripts/fuzz.sh $(FUZZ_SECONDS)

schemathesis: deps-test swift-check ## Run schemathesis against a fresh node's OpenAPI document (100 examples per operation)
	@$(SWIFT) build $(BUILD_ARGS)
	@bash scripts/schemathesis.sh 100

check-docs: ## Check that every relative link and anchor in README.md, CHANGELOG.md and docs/ resolves
	$(call step,relative links and anchors in README.md and CHANGELOG.md and docs/)
	@$(PYTHON) scripts/check-links.py

check-unit: ## Install into a scratch DESTDIR and check the systemd unit with systemd-analyze verify
	$(call step,systemd-analyze verify on the installed unit)
	@bash scripts/check-unit.sh

lint: swift-check check-docs ## Check formatting and style (swift format lint --strict), the documents' links, and that the node's shell names no feature
	@$(SWIFT) format --version >/dev/null 2>&1 || { \
	  echo "error: '$(SWIFT) format' is not available; it ships with Swift 6 toolchains." >&2; exit 1; }
	$(call step,swift format lint --strict)
	@$(SWIFT) format lint --strict --parallel -r $(LINT_PATHS)
	$(call step,the node's shell names no feature type)
	@bash scripts/check-blind-shell.sh
	@echo "lint: clean"

format: swift-check ## Reformat Sources, Tests and Package.swift in place
	@$(SWIFT) format --version >/dev/null 2>&1 || { \
	  echo "error: '$(SWIFT) format' is not available; it ships with Swift 6 toolchains." >&2; exit 1; }
	@$(SWIFT) format format -i --parallel -r $(LINT_PATHS)
	@echo "format: done"

bench: ## Run the benchmarks (bench/run.sh)
	@if [ -f bench/run.sh ]; then \
	  bash bench/run.sh; \
	else \
	  echo "error: bench/run.sh does not exist yet: benchmarks are not available." >&2; \
	  exit 1; \
	fi

docker-test: ## Build the image and prove Docker/compose.yml: TLS mesh, job, file, health, stop, volumes (docker or podman)
	@bash scripts/docker-test.sh

docker-clean: ## Remove the docker-test image, its build cache and the locally prepared base images
	@bash scripts/docker-clean.sh

install: deps swift-check ## Install the binary, dashboard, man page and systemd unit (PREFIX=/usr/local, DESTDIR=)
	@$(MAKE) static-binary
	@$(MAKE) install-files

static-binary:
	$(call step,swift build -c release --static-swift-stdlib (the installed binary))
	@$(SWIFT) build -c release --static-swift-stdlib --scratch-path $(INSTALL_SCRATCH) --product meshgate $(BUILD_ARGS)

# Copies what `install` installs, from an already built INSTALL_BINARY (used by install, check-unit and deb).
install-files:
	@test -x "$(INSTALL_BINARY)" || { echo "error: $(INSTALL_BINARY) is not built; run make build (or make install)" >&2; exit 1; }
	install -d "$(DESTDIR)$(BINDIR)" "$(DESTDIR)$(SHAREDIR)" "$(DESTDIR)$(MANDIR)" "$(DESTDIR)$(UNITDIR)"
	install -m 0755 "$(INSTALL_BINARY)" "$(DESTDIR)$(BINDIR)/meshgate"
	rm -rf "$(DESTDIR)$(SHAREDIR)/Public"
	cp -R Public "$(DESTDIR)$(SHAREDIR)/Public"
	chmod -R u=rwX,go=rX "$(DESTDIR)$(SHAREDIR)/Public"
	$(PYTHON) scripts/manpage.py "$(INSTALL_BINARY)" > "$(DESTDIR)$(MANDIR)/meshgate.1"
	chmod 0644 "$(DESTDIR)$(MANDIR)/meshgate.1"
	sed 's|@BINDIR@|$(BINDIR)|g' packaging/meshgate.service.in > "$(DESTDIR)$(UNITDIR)/meshgate.service"
	chmod 0644 "$(DESTDIR)$(UNITDIR)/meshgate.service"
	@if [[ ! -e "$(DESTDIR)$(SYSCONFDIR)/default/meshgate" ]]; then \
	  install -D -m 0644 packaging/meshgate.default "$(DESTDIR)$(SYSCONFDIR)/default/meshgate"; \
	else \
	  echo "kept $(DESTDIR)$(SYSCONFDIR)/default/meshgate (your settings)"; \
	fi
	@if [[ -z "$(DESTDIR)" ]]; then \
	  echo; echo "Installed. Start it with: systemctl daemon-reload && systemctl enable --now meshgate"; \
	  echo "Its admin token: journalctl -u meshgate -o cat | grep admin-token (see docs/operations.md)"; \
	fi

uninstall: ## Remove what make install installed (keeps /etc/default/meshgate and the data in /var/lib/meshgate)
	@if [[ -z "$(DESTDIR)" ]] && command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet meshgate 2>/dev/null; then \
	  echo "error: the meshgate service is running; stop it first: systemctl disable --now meshgate" >&2; exit 1; \
	fi
	rm -f "$(DESTDIR)$(BINDIR)/meshgate" "$(DESTDIR)$(MANDIR)/meshgate.1" "$(DESTDIR)$(UNITDIR)/meshgate.service"
	rm -rf "$(DESTDIR)$(SHAREDIR)"
	@echo "Kept $(SYSCONFDIR)/default/meshgate and the data directory /var/lib/meshgate; remove them by hand if wanted."

deb: deps swift-check ## Build a Debian package (.build/deb/meshgate_VERSION_ARCH.deb) with dpkg-deb
	@$(MAKE) static-binary
	@INSTALL_BINARY=$(INSTALL_BINARY) bash scripts/make-deb.sh

clean: ## Remove build outputs and test artifacts (keeps .meshgate data)
	rm -rf .build test-artifacts
