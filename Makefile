# Quiver build, test and benchmark entry points.
#   make run    install dependencies, build everything, start a single node
#   make test   build, then run every test suite; last line "N passed, N failed"
#   make bench  engine benchmark (quick); `npm run bench:engine` for the full one

SHELL := /bin/bash
DEBIAN_RUSTC ?= /usr/bin/rustc
DEBIAN_CARGO ?= /usr/bin/cargo
WASM_OUT := crates/quiver-wasm/target/wasm32-unknown-unknown/release/quiver_wasm.wasm

.PHONY: all install setup-test setup-bench build addon wasm ts test bench bench-full run clean

all: build

# scripts/setup.sh installs what the machine lacks (and nothing the second time);
# `make test` and .ci/run use its test profile, `make setup-bench` its bench profile,
# everything else its build profile.
install:
	./scripts/setup.sh build

setup-test:
	./scripts/setup.sh test

# The load generators bench:rest, bench:ab-grpc and the A/B tools drive (wrk, h2load,
# hyperfine); see scripts/setup.sh. bench:engine needs none of them.
setup-bench:
	./scripts/setup.sh bench

build: install addon wasm ts

addon: install
	npx napi build --release --platform --manifest-path crates/quiver-node/Cargo.toml \
	  --config-path crates/quiver-node/napi.json --output-dir crates/quiver-node --no-js --dts index.d.ts

wasm: install
	cd crates/quiver-wasm && RUSTC=$(DEBIAN_RUSTC) $(DEBIAN_CARGO) build --target wasm32-unknown-unknown --release

ts: install
	npx tsc -p tsconfig.json

# The three builds are independent (the addon and the WASM module have target
# directories of their own, tsc reads neither) and mostly single-threaded (codegen-units = 1,
# tsc), so they run side by side on two cores.
test: setup-test
	$(MAKE) --no-print-directory -j3 build
	./scripts/run-tests.sh

bench: build
	npm run bench:engine -- --quick

bench-full: build
	npm run bench:engine

run: build
	node bin/quiver

clean:
	cargo clean
	rm -rf dist crates/quiver-wasm/target crates/quiver-node/*.node
