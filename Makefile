# rlock: the two commands a new user needs are `make run` and `make test`.
SHELL := /bin/bash
MODULE := target/release/librlock_module.so
PORT ?= $(shell awk '$$1=="port"{print $$2}' redis.conf)

.PHONY: deps build run test unit integration clean

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

clean:
	cargo clean
