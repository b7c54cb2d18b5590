# The two commands of the README: `make demo` and `make test`.
# Both create .venv if missing and install torch (TORCH_INDEX: a pip index to take it
# from, e.g. https://download.pytorch.org/whl/cpu for the CPU build), the package with
# its compiled extension (--no-build-isolation) and the test tools. torch is installed once per .venv
# (.deps-stamp): TORCH_SPEC and TORCH_INDEX apply to a fresh .venv only (the README says so).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
TORCH_SPEC ?= torch==2.13.0
TORCH_INDEX ?=
NVCC ?= $(shell command -v nvcc 2>/dev/null)
PYTEST_ARGS ?=

.PHONY: demo test install FORCE cuda-check cross-check arm-check bench compat clean

$(PY):
	$(PYTHON) -m venv $(VENV)

# Build tools and torch first: the extension build needs them without isolation
# (numpy too: torch warns while building without it, and spaCy needs it anyway). The build tools
# as pyproject's [build-system] requires them: a venv comes with an older setuptools (65 with
# Python 3.11), which fails on pyproject's license field; only some torch releases pull a newer one.
# The torch just installed is named again (already satisfied: nothing fetched) so that pip keeps its
# requirements: 2.12 caps setuptools < 82, and an upgrade alone took the newest (84) past the cap.
$(VENV)/.deps-stamp: | $(PY)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX)) "$(TORCH_SPEC)"
	$(PIP) install -q "setuptools>=77" wheel ninja numpy "$(TORCH_SPEC)"
	touch $@

# The editable install (metadata, entry points, the test tools), once per change of the files it is made
# from. It builds no extension (SPACY_ELMO_NO_EXTENSION=1): pip's editable build compiles in a fresh
# temporary folder, so every `make test` recompiled all of csrc/. The extension is built below, in place.
$(VENV)/.install-stamp: $(VENV)/.deps-stamp pyproject.toml setup.py build_flags.py
	SPACY_ELMO_NO_EXTENSION=1 $(PIP) install -q --no-build-isolation -e ".[test]"
	touch $@

# spacy_elmo/_C*.so, built in place, where the editable install imports it from: again whenever a file of
# csrc/ or the build changed, or the .so is missing (after `make clean`). build/ keeps ninja's objects, so
# only what changed compiles (--force: distutils looks at the .cpp files only, not at the headers ninja
# follows). A new .venv or a torch installed since (its version.py newer) clears build/ first: its objects
# were compiled against another torch's headers.
CSRC := $(shell find csrc -type f 2>/dev/null)
TORCH_VERSION_PY := $(wildcard $(VENV)/lib/python*/site-packages/torch/version.py)
EXT_BUILT := $(wildcard spacy_elmo/_C*.so)

$(VENV)/.ext-stamp: $(VENV)/.deps-stamp $(TORCH_VERSION_PY) $(CSRC) setup.py build_flags.py $(if $(EXT_BUILT),,FORCE) \
		| $(VENV)/.install-stamp
	$(if $(filter $(VENV)/.deps-stamp $(TORCH_VERSION_PY),$?),rm -rf build)
	$(PY) setup.py -q build_ext --inplace --force
	touch $@

install: $(VENV)/.ext-stamp

FORCE:

# Compile every CUDA source with the machine's nvcc (compile-only: no GPU here).
cuda-check:
ifneq ($(NVCC),)
	$(PY) scripts/cuda_compile_check.py --nvcc "$(NVCC)"
else
	@echo "cuda-check: nvcc not found, skipping the CUDA compile check"
endif

# Compile every C++ source for aarch64 Linux and macOS (arm64 and x86-64, with and without
# torch's libomp) with zig's clang from the ziglang package (compile-only: nothing runs there).
# Not part of `make test`: its 50 compiles take about 7 minutes of CPU time (13-15 minutes
# wall-clock on the busy 2-core machine it was measured on), more than the suite itself.
ZIGLANG_SPEC ?= ziglang==0.17.1

cross-check: install
	$(PIP) install -q "$(ZIGLANG_SPEC)"
	$(PY) scripts/cross_compile_check.py

# Build and test under another torch release (`make compat TORCH=2.15.0`): a throwaway venv and copy
# of the checkout under /tmp (scripts/torch_compat.sh says more). Not part of `make test`: on x86-64
# Linux pip fetches torch's multi-GB CUDA build.
TORCH ?=

compat:
	PYTHON="$(PYTHON)" bash scripts/torch_compat.sh "$(TORCH)"

# Build the extension for aarch64 Linux and run its kernel tests there, emulated: an arm64 Debian
# chroot under qemu-user, built with the host's cross g++ (scripts/arm_emulated_check.sh says how).
# Needs root, apt and PyPI; not part of `make test` (tens of minutes: the tests run emulated).
arm-check:
	bash scripts/arm_emulated_check.sh

test: install cuda-check
	$(PY) -m pytest -q $(PYTEST_ARGS) tests

demo: install
	$(PY) -m spacy_elmo demo

bench: install
	$(PY) benchmarks/kernels.py

clean:
	rm -rf build *.egg-info spacy_elmo/_C*.so $(VENV)/.ext-stamp
