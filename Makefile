# rlock: the two commands a new user needs are `make run` and `make test`.
SHELL := /bin/bash
MODULE := target/release/librlock_module.so
PORT ?= $(shell awk '$$1=="port"{print $$2}' redis.conf)

.PHONY: deps build run test bench bench-quick clean

deps:
	@bash scripts/install-deps.sh

build: deps
	cargo build --release -p rlock-module

# Build, then start redis-server in the foreground with the module (Ctrl-C stops it).
run: build
	@mkdir -p data
	@echo "==> starting redis-server with rlock on port $(PORT) (data in ./data, log on stdout)"
	@echo "==> connect with:  redis-cli -p $(PORT)"
	@echo "==> then try:      RLOCK.ACQUIRE mylock client-1 30000"
	redis-server redis.conf

test: deps
	cargo build --release -p rlock-module
	RLOCK_MODULE=$(CURDIR)/$(MODULE) cargo test --release --workspace --no-fail-fast

# Benchmark: rlock vs Redisson's Lua protocol vs the native-command ceiling, in one run.
# Prints a markdown table and writes it with an SVG chart under bench/results/.
bench: deps
	cargo build --release -p rlock-module -p rlock-bench
	RLOCK_MODULE=$(CURDIR)/$(MODULE) target/release/rlock-bench

# A short smoke run of every scenario (CI runs it: it must complete with mutual exclusion held).
bench-quick: deps
	cargo build --release -p rlock-module -p rlock-bench
	RLOCK_MODULE=$(CURDIR)/$(MODULE) target/release/rlock-bench --quick

clean:
	cargo clean
