# make serve: set up .venv and start the dashboard; make test: set up and run every test.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TEST_STAMP := $(VENV)/.installed-test

.PHONY: serve test bench clean browser compiled test-tools bytecode types

# the engine and the dashboard (what `make serve` needs); --no-compile: pip's byte-compiling of every installed file
# (about 20 of the 36 CPU s) waits for `bytecode` below, on a free core
$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "need $(PYTHON) on PATH (or: make PYTHON=python3 ...)"; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet --no-compile -e .
	touch $(STAMP)

# the test tools (pyproject's `test` extra), installed without reinstalling the project, so that this can run
# while the fusion search compiles
$(TEST_STAMP): $(STAMP)
	$(BIN)/python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['optional-dependencies']['test']))" > $(VENV)/test-requirements.txt
	$(BIN)/python -m pip install --quiet --no-compile -r $(VENV)/test-requirements.txt
	touch $(TEST_STAMP)

test-tools: $(TEST_STAMP)

# the installed packages' .pyc files, which pip was told not to write (without them each process compiles what it
# imports, again and again where PYTHONDONTWRITEBYTECODE is set); files already compiled are skipped, and so are the
# packages' own test suites (pandas', numpy's, ...: 28 % of the source, never imported here; 25 -> 13 CPU s)
bytecode: $(STAMP)
	$(BIN)/python -m compileall -qq -x '/tests/' $(VENV)/lib

# on the core the compile leaves free: the test tools' .pyc files, then mypy's first check of the engine (about 25
# CPU s), whose cache tests/test_lint.py's `mypy engine` reads (files unchanged: the same verdict and messages)
types: $(TEST_STAMP)
	@$(MAKE) --no-print-directory bytecode
	-$(BIN)/python -m mypy engine >/dev/null

# The fusion search's compiled code (engine/fusion/core/): Numba compiles it once (about two minutes) and caches
# it beside the source; after that this loads it in about a second. serve and test do it first, so that no
# page load or test waits on the compiler.
compiled: $(STAMP)
	@echo "loading the compiled fusion search (the first time after install: compiling it, about two minutes)"
	$(BIN)/python -c "from engine.fusion.optimus import compile_ahead; compile_ahead()"

# a closed page's session ends 60-61 s later, and with it that page's work (its work not started is dropped then;
# its prefetch, served after every page's asked-for work, runs till then); a page has as long to open its websocket
# after its HTML: a session unused for 1 s, and under load one unused for 15 s, was dropped before a slow browser
# connected, and its document built again on the event loop (docs/dashboard.md, "A room of users")
serve: compiled bytecode
	$(BIN)/panel serve dashboard --address $${ADDRESS:-127.0.0.1} --port $${PORT:-5006} \
	  --check-unused-sessions 1000 --unused-session-lifetime 60000 \
	  --allow-websocket-origin $${ADDRESS:-127.0.0.1}:$${PORT:-5006} --allow-websocket-origin localhost:$${PORT:-5006}

# the compile (a core for about a minute) beside the test tools' install, the .pyc files, mypy's first check and the
# browser's
test: $(STAMP)
	@$(MAKE) --no-print-directory -j3 compiled types browser
	$(BIN)/python -m pytest

# The end-to-end tests drive Debian's chromium; install it where missing and we may (root with apt-get).
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  else echo "chromium is missing and cannot be installed here: the browser tests will be skipped"; fi; }

bench: $(TEST_STAMP)
	$(BIN)/python -m benchmarks.run

clean:
	rm -rf $(VENV)
