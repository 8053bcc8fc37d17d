# Front door: `make demo` and `make test` do all set-up on a fresh Debian 12 machine.
BUILD ?= build
# The CPU-only configuration (-DTESSERA_CUDA=OFF): what a user without nvcc gets. CI
# builds and tests it next to the CUDA one so it keeps linking.
BUILD_CPU ?= build-cpu
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all bootstrap configure build build-cpu demo test test-cpu-only test-gpu clean

all: build

bootstrap:
	./scripts/bootstrap.sh

configure: bootstrap
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

build: configure
	cmake --build $(BUILD) -j $(JOBS)

build-cpu: bootstrap
	cmake -S . -B $(BUILD_CPU) -G Ninja -DCMAKE_BUILD_TYPE=Release -DTESSERA_CUDA=OFF $(CMAKE_FLAGS)
	cmake --build $(BUILD_CPU) -j $(JOBS)

# The main job on its built-in default: the 1-D function fit (Adam), outputs in demo_out/.
demo: build
	./$(BUILD)/tessera fit function --out demo_out --json demo_out/result.json

# Every test of the default build (GPU tests skip visibly without a CUDA device), then the
# CPU-only build's tests.
test: build build-cpu
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 1500
	cd $(BUILD_CPU) && ctest --output-on-failure -j $(JOBS) --timeout 1500

test-cpu-only: build-cpu
	cd $(BUILD_CPU) && ctest --output-on-failure -j $(JOBS) --timeout 1500

test-gpu: build
	cd $(BUILD) && ctest --output-on-failure -L gpu

clean:
	rm -rf $(BUILD) $(BUILD_CPU)
