# Front door: `make demo` and `make test` do all set-up on a fresh Debian 12 machine.
BUILD ?= build
# The CPU-only configuration (-DTESSERA_CUDA=OFF): what a user without nvcc gets. CI
# builds and tests it next to the CUDA one so it keeps linking.
BUILD_CPU ?= build-cpu
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
# Address + UndefinedBehavior sanitizers and the libFuzzer targets (clang, CPU-only).
BUILD_SAN ?= build-san
# Seconds each fuzz target runs in `make fuzz` (and in `make test`, FUZZ_SECONDS_CI).
FUZZ_SECONDS ?= 300
FUZZ_SECONDS_CI ?= 15
# ctest -j runs two OpenMP tests on two cores: threads that spin while they wait (libgomp's
# default) take the cores the other test needs, and the pair runs ~20% longer than passive.
CTEST = OMP_WAIT_POLICY=passive ctest --output-on-failure --timeout 1500
# CUDA architectures: empty = CMakeLists.txt's default, every GPU generation (README,
# "Supported GPUs"). `make test` on a machine with no NVIDIA GPU (CI) has no CUDA test to run,
# so it compiles the two code paths that differ, sm_75 (Turing's stand-ins for newer
# instructions) and sm_90 (every sm_80+ path, and Hopper's wgmma kernels), in a quarter of
# the time of all eight; with a GPU it builds them all.
CUDA_ARCHS ?=
TEST_CUDA_ARCHS ?= $(if $(shell nvidia-smi -L 2>/dev/null),$(CUDA_ARCHS),75-real;90-real)

.PHONY: all bootstrap configure build build-cpu build-san demo python wheel test test-cpu-only test-gpu test-san \
  test-install test-python-install fuzz clean

all: build

bootstrap:
	./scripts/bootstrap.sh

configure: bootstrap
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(if $(CUDA_ARCHS),"-DTESSERA_CUDA_ARCHS=$(CUDA_ARCHS)",-UTESSERA_CUDA_ARCHS) $(CMAKE_FLAGS)

build: configure
	cmake --build $(BUILD) -j $(JOBS)

build-cpu: bootstrap
	cmake -S . -B $(BUILD_CPU) -G Ninja -DCMAKE_BUILD_TYPE=Release -DTESSERA_CUDA=OFF $(CMAKE_FLAGS)
	cmake --build $(BUILD_CPU) -j $(JOBS)

build-san: bootstrap
	CC=clang-15 CXX=clang++-15 cmake -S . -B $(BUILD_SAN) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DTESSERA_CUDA=OFF -DTESSERA_FUZZ=ON $(CMAKE_FLAGS)
	cmake --build $(BUILD_SAN) -j $(JOBS)

# The Python package (python/tessera: numpy, and tessera.torch for PyTorch) with libtessera.so
# inside, pip-installed into the active virtual environment, else the user's site-packages.
python: build
	./scripts/install_python.sh $(BUILD)

# The main job on its built-in default: the 1-D function fit (Adam), outputs in demo_out/.
demo: build
	./$(BUILD)/tessera fit function --out demo_out --json demo_out/result.json

# A binary wheel of the Python package (libtessera.so with the CUDA runtime and every
# architecture inside, the shared libraries it needs beside it) in dist/: pip installs it on
# an x86-64 Linux with no compiler (scripts/build_wheel.sh).
wheel: build
	./scripts/build_wheel.sh $(BUILD) dist

# Every test of the default build (GPU tests skip visibly without a device; the CPU backend
# and the CLI run everything else), the CPU unit tests in the sanitizer build (also CPU-only:
# -DTESSERA_CUDA=OFF keeps linking), each fuzz target for FUZZ_SECONDS_CI, and the installed
# package built against by examples/. `make test-cpu-only` tests the gcc CPU-only build too.
test: build-san
	$(MAKE) build CUDA_ARCHS="$(TEST_CUDA_ARCHS)"
	cd $(BUILD) && $(CTEST) -j $(JOBS)
	cd $(BUILD_SAN) && $(CTEST) -j $(JOBS) -L unit
	FUZZ_SEED=1 ./scripts/fuzz.sh $(BUILD_SAN) $(FUZZ_SECONDS_CI)
	$(MAKE) test-install test-python-install CUDA_ARCHS="$(TEST_CUDA_ARCHS)"

# The installed package as a user's project sees it: `cmake --install` into a scratch
# prefix, examples/ configured on its own with find_package(tessera), built and run.
test-install: build
	rm -rf $(BUILD)/install-test $(BUILD)/examples-outside
	cmake --install $(BUILD) --prefix $(BUILD)/install-test
	cmake -S examples -B $(BUILD)/examples-outside -G Ninja -DCMAKE_PREFIX_PATH=$(CURDIR)/$(BUILD)/install-test
	cmake --build $(BUILD)/examples-outside -j $(JOBS)
	$(BUILD)/examples-outside/example_rbm cpu

# The wheel as a user installs it, into a fresh virtual environment that sees Debian's torch
# and numpy (no network); then the installed package (not the checkout) trains a model and
# reports the machine.
test-python-install: build
	rm -rf $(BUILD)/python-venv $(BUILD)/dist
	./scripts/build_wheel.sh $(BUILD) $(BUILD)/dist
	/usr/bin/python3 -m venv --system-site-packages $(BUILD)/python-venv
	$(BUILD)/python-venv/bin/python -m pip install --quiet --no-index --no-deps $(BUILD)/dist/tessera-*.whl
	cd $(BUILD) && ./python-venv/bin/python -c "import tessera, json; i = tessera.info(); print('tessera', i['version'], 'from', tessera.library_path); assert i['backends']['cpu']"
	cd $(BUILD) && ./python-venv/bin/python $(CURDIR)/examples/python/fit_image.py --steps 50 --batch 8192 --device cpu --min-psnr 18

# The CPU unit tests under AddressSanitizer + UndefinedBehaviorSanitizer.
test-san: build-san
	cd $(BUILD_SAN) && $(CTEST) -j $(JOBS) -L unit

# Each libFuzzer target (tests/fuzz/) for FUZZ_SECONDS, e.g. make fuzz FUZZ_SECONDS=3600.
fuzz: build-san
	./scripts/fuzz.sh $(BUILD_SAN) $(FUZZ_SECONDS)

test-cpu-only: build-cpu
	cd $(BUILD_CPU) && $(CTEST) -j $(JOBS)

test-gpu: build
	cd $(BUILD) && $(CTEST) -L gpu

clean:
	rm -rf $(BUILD) $(BUILD_CPU) $(BUILD_SAN)
