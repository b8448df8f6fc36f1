# Two commands do all set-up on a fresh machine:  `make demo` (main job)  and  `make test`.
# Both create and fill the virtual environment in .venv when it is missing or out of date.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.xaikit-installed
export MPLBACKEND := Agg
export TF_CPP_MIN_LOG_LEVEL := 2

.PHONY: demo test test-fast test-numerics lint docs gallery bench browser clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c constraints.txt -e ".[torch,tf-cpu,dev]"
	$(PY) -m pip install -q --no-deps -c constraints.txt grad-cam zennit  # peers of tests/xai/test_cam_peers.py and tests/rules (LGPL zennit: a test-time peer only; its torchvision import is stubbed in tests/rules/zennit_peer.py)
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/xaikit demo --out runs/demo

# Chromium for the report's browser tests (tests/test_report_browser.py): Debian's package, as
# root or through sudo. Without it those tests skip on a user's machine and fail on CI.
browser:
	@if command -v chromium >/dev/null 2>&1; then echo "chromium: $$(command -v chromium)"; \
	elif [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq chromium; \
	elif command -v sudo >/dev/null 2>&1; then sudo apt-get update -qq && sudo apt-get install -y -qq chromium; \
	else echo "make browser: chromium is missing; install it as root (apt-get install chromium)" >&2; exit 1; fi

test: $(STAMP)
	$(PY) -m pytest -q -n 2 --dist loadfile --doctest-modules xaikit tests

# The numerics-sensitive tests (marker `numerics`, tests/conftest.py) once more with other CPU
# kernels: torch's ATen and oneDNN (torch's and TensorFlow's) held to an older instruction set,
# so a tolerance that holds on one CPU only fails here. On an AVX-512 machine also try
# `make test-numerics ATEN_ISA=avx2 ONEDNN_ISA=AVX2`.
ATEN_ISA   ?= default
ONEDNN_ISA ?= SSE41
test-numerics: $(STAMP)
	ATEN_CPU_CAPABILITY=$(ATEN_ISA) ONEDNN_MAX_CPU_ISA=$(ONEDNN_ISA) $(PY) -m pytest -q -n 2 --dist loadfile tests -m numerics

test-fast: $(STAMP)
	$(PY) -m pytest -q -n 2 --dist loadfile --doctest-modules xaikit tests -m "not slow"

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

# the method table of docs/methods.md is written from the method records first
docs: $(STAMP)
	$(PY) tools/method_table.py
	$(VENV)/bin/mkdocs build --strict

gallery: $(STAMP)
	$(PY) gallery/make_all.py

bench: $(STAMP)
	$(PY) benchmarks/saliency_bench.py

clean:
	rm -rf $(VENV) runs site .pytest_cache .mypy_cache .ruff_cache
