# Front door: `make demo` and `make test` do all set-up on a fresh Debian 12 machine.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all bootstrap configure build demo test test-gpu clean

all: build

bootstrap:
	./scripts/bootstrap.sh

configure: bootstrap
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

build: configure
	cmake --build $(BUILD) -j $(JOBS)

# The main job on its built-in default: the 1-D function fit (Adam), outputs in demo_out/.
demo: build
	./$(BUILD)/tessera fit function --out demo_out --json demo_out/result.json

# Every test; GPU tests skip visibly without a CUDA device.
test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 1500

test-gpu: build
	cd $(BUILD) && ctest --output-on-failure -L gpu

clean:
	rm -rf $(BUILD)
