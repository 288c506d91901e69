# One venv, made by the project itself. torch is installed first from its pinned CPU build,
# so nothing later pulls a multi-GB CUDA wheel.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml constraints.txt | sha1sum | cut -c1-12)

export OMP_NUM_THREADS ?= 1
export RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER ?= 0
export RAY_USAGE_STATS_ENABLED ?= 0

.PHONY: setup accel browser run test bench clean
setup: $(STAMP) accel

# The compiled simulator core (mypyc; docs/bench/accel.md): rebuilt only when a listed source changed;
# without a C compiler it says so in one line and the pure-Python simulator runs (same results).
accel: $(STAMP)
	$(PY) -m inferencegym.accel build --if-stale

# Headless Chromium (Debian package) for the web-page test. Installed when we are root (CI, these
# machines); elsewhere install it yourself (`apt-get install chromium`) or the page test is skipped
# locally (under CI=true it fails instead).
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  else echo "note: chromium not installed (needs root): the /web screenshot test will not run"; fi; }

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -c constraints.txt -e '.[dev]'
	rm -f $(VENV)/.installed-*
	touch $@

run: setup          ## the main job on embedded defaults
	$(VENV)/bin/inferencegym demo

test: setup browser ## the test suite
	$(PY) -m pytest -q -p no:cacheprovider tests

bench: setup
	$(PY) benchmarks/sim_speed.py

clean:
	rm -rf $(VENV) build *.egg-info
