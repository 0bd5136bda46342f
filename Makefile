# snapshotd: `make run` serves, `make test` tests; both install what is missing first.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
ORIGIN ?=
PORT   ?= 8080
# Processes the suite runs in: most of its time is spent waiting on timers and browsers, so
# more than the cores (2 here) still shortens it.
TEST_JOBS ?= 3
# More for pytest: PYTEST_ARGS="--seed 1234" repeats a run's random draws (its last line
# says the seed, how long it took and how many tests each process ran; the slowest ten
# tests are listed above it).
PYTEST_ARGS ?=

.PHONY: run test test-floors lint bench bench-apps chromium clean screenshot lock

# The versions installed are the lock's (requirements-dev.lock: the application's with the
# tests' tools, every file's hash); snapshotd itself is installed from this tree on top.
$(STAMP): pyproject.toml requirements-dev.lock
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q --require-hashes -r requirements-dev.lock
	$(BIN)/pip install -q --no-deps -e .
	touch $(STAMP)

# The locks made again from pyproject.toml's ranges, for every platform and Python 3.11 on:
# requirements.lock (the application's, which the Dockerfile installs) and
# requirements-dev.lock (with the tests' tools). uv is installed for this alone.
LOCK_TOOLS := $(VENV)/lock-tools
lock:
	test -x $(LOCK_TOOLS)/bin/uv || ($(PYTHON) -m venv $(LOCK_TOOLS) && $(LOCK_TOOLS)/bin/pip install -q uv)
	$(LOCK_TOOLS)/bin/uv pip compile -q --universal --python-version 3.11 --generate-hashes \
		pyproject.toml -o requirements.lock
	$(LOCK_TOOLS)/bin/uv pip compile -q --universal --python-version 3.11 --generate-hashes \
		--extra dev pyproject.toml -o requirements-dev.lock

# The application's dependencies at the floors pyproject.toml declares (scripts/floors.py:
# each ">=X" installed as "==X", over the test lock), and the tests of the surface they
# are used by: serve's HTTP stack on uvicorn, httptools and uvloop, the API on Starlette,
# the stores (SQLite, PostgreSQL), rendering on Playwright (with the Chromium `make test`
# finds), fetches, bots, links, sitemaps, robots, patterns, notifications, crawler
# verification's DNS (dnspython). FLOOR_TESTS=
# (empty) runs the whole suite. Not part of `make test`.
FLOORS := .venv-floors
FLOOR_TESTS ?= tests/test_uvicorn_contract.py tests/test_protocol.py tests/test_relay.py \
	tests/test_framing.py tests/test_http1.py tests/test_proxy_stream.py tests/test_api.py \
	tests/test_store.py tests/test_fetch.py tests/test_bots.py tests/test_links.py \
	tests/test_sitemaps.py tests/test_crawler_robots.py tests/test_regex_bounds.py \
	tests/test_urls.py tests/test_spellings.py tests/test_crawlbot.py tests/test_render.py \
	tests/test_verify.py
test-floors:
	test -x $(FLOORS)/bin/python || $(PYTHON) -m venv $(FLOORS)
	$(FLOORS)/bin/pip install -q --upgrade pip
	$(FLOORS)/bin/pip install -q --require-hashes -r requirements-dev.lock
	$(FLOORS)/bin/python scripts/floors.py > $(FLOORS)/floors.txt
	$(FLOORS)/bin/pip install -q -r $(FLOORS)/floors.txt
	$(FLOORS)/bin/pip install -q --no-deps -e .
	$(FLOORS)/bin/python -m pytest -q $(FLOOR_TESTS)

chromium: $(STAMP)
	@PATH="$(CURDIR)/$(BIN):$$PATH" sh scripts/ensure-chromium.sh

run: chromium
	@PATH="$(CURDIR)/$(BIN):$$PATH" sh scripts/run.sh "$(ORIGIN)" "$(PORT)"

# The prerender-node test's npm packages; without npm that test skips (fails under CI=true).
tests/prerender_node/node_modules/.package-lock.json: tests/prerender_node/package-lock.json
	@if command -v npm >/dev/null 2>&1; then \
		npm ci --prefix tests/prerender_node --no-audit --no-fund --loglevel=error; \
	else echo "npm not found: the prerender-node test will be skipped"; fi

# SEO4Ajax's connect-s4a middleware in front of Express, for the SEO4Ajax face's test.
tests/connect_s4a/node_modules/.package-lock.json: tests/connect_s4a/package-lock.json
	@if command -v npm >/dev/null 2>&1; then \
		npm ci --prefix tests/connect_s4a --no-audit --no-fund --loglevel=error; \
	else echo "npm not found: the connect-s4a test will be skipped"; fi
# The Rendertron middleware test's npm packages; without npm that test skips (fails under CI=true).
tests/rendertron/node_modules/.package-lock.json: tests/rendertron/package-lock.json
	@if command -v npm >/dev/null 2>&1; then \
		npm ci --prefix tests/rendertron --no-audit --no-fund --loglevel=error; \
	else echo "npm not found: the rendertron-middleware test will be skipped"; fi

# The Compose Specification's schema and a validator, for compose.yaml's test.
tests/deploy/node_modules/.package-lock.json: tests/deploy/package-lock.json
	@if command -v npm >/dev/null 2>&1; then \
		npm ci --prefix tests/deploy --no-audit --no-fund --loglevel=error; \
	else echo "npm not found: the compose file test will be skipped"; fi

# Real browsers' User-Agent strings for the bot detection test (npm's user-agents data).
tests/browser_agents/node_modules/.package-lock.json: tests/browser_agents/package-lock.json
	@if command -v npm >/dev/null 2>&1; then \
		npm ci --prefix tests/browser_agents --no-audit --no-fund --loglevel=error; \
	else echo "npm not found: the browser corpus test will be skipped"; fi

# The readiness corpus's framework builds (Vue, React, Preact, AngularJS) from npm.
tests/corpus/apps/node_modules/.package-lock.json: tests/corpus/apps/package-lock.json
	@if command -v npm >/dev/null 2>&1; then \
		npm ci --prefix tests/corpus/apps --no-audit --no-fund --loglevel=error; \
	else echo "npm not found: the corpus's framework apps will be skipped"; fi

# The device-profile corpus's libraries (lozad, lazysizes, React and its hooks' libraries, Vue,
# enquire.js, Swiper, ua-parser-js, ismobilejs, mobile-detect) from npm.
tests/corpus/devices/node_modules/.package-lock.json: tests/corpus/devices/package-lock.json
	@if command -v npm >/dev/null 2>&1; then \
		npm ci --prefix tests/corpus/devices --no-audit --no-fund --loglevel=error; \
	else echo "npm not found: the device corpus's apps will fail their test"; fi

# The web-component corpus's libraries (Lit, Shoelace, Ionic's Stencil components, FAST,
# Material Web) from npm; their install scripts are not needed to serve their builds.
tests/corpus/webcomponents/node_modules/.package-lock.json: tests/corpus/webcomponents/package-lock.json
	@if command -v npm >/dev/null 2>&1; then \
		npm ci --prefix tests/corpus/webcomponents --ignore-scripts --no-audit --no-fund --loglevel=error; \
	else echo "npm not found: the web-component corpus's pages will fail their test"; fi

# The soft-404 corpus's routers (React Router with React, Vue Router with Vue) from npm.
tests/corpus/soft404/node_modules/.package-lock.json: tests/corpus/soft404/package-lock.json
	@if command -v npm >/dev/null 2>&1; then \
		npm ci --prefix tests/corpus/soft404 --no-audit --no-fund --loglevel=error; \
	else echo "npm not found: the soft-404 corpus's apps will fail their test"; fi

# The prerender server bench/bench_readiness.py compares against.
bench/prerender/node_modules/.package-lock.json: bench/prerender/package-lock.json
	@if command -v npm >/dev/null 2>&1; then \
		npm ci --prefix bench/prerender --no-audit --no-fund --loglevel=error; \
	else echo "npm not found: bench_readiness.py will leave prerender out"; fi

test: chromium tests/prerender_node/node_modules/.package-lock.json \
		tests/connect_s4a/node_modules/.package-lock.json \
		tests/rendertron/node_modules/.package-lock.json \
		tests/deploy/node_modules/.package-lock.json \
		tests/browser_agents/node_modules/.package-lock.json \
		tests/corpus/apps/node_modules/.package-lock.json \
		tests/corpus/devices/node_modules/.package-lock.json \
		tests/corpus/webcomponents/node_modules/.package-lock.json \
		tests/corpus/soft404/node_modules/.package-lock.json
	@sh scripts/ensure-test-tools.sh
	$(BIN)/python -m pytest -q -n $(TEST_JOBS) --durations=10 $(PYTEST_ARGS)

# The console's screenshots in docs/ (README), taken by its test at 1280 and 390 px.
screenshot: chromium
	SNAPSHOTD_SCREENSHOT_DIR=docs $(BIN)/python -m pytest -q tests/test_console_overview.py -k overview

lint: $(STAMP)
	$(BIN)/ruff check snapshotd tests bench
	$(BIN)/mypy snapshotd

# The docsify documentation app bench/bench_crawl_waste.py crawls (its install scripts are
# its maintainers' own tooling, not needed to serve it).
bench/docs_spa/node_modules/.package-lock.json: bench/docs_spa/package-lock.json
	@if command -v npm >/dev/null 2>&1; then \
		npm ci --prefix bench/docs_spa --ignore-scripts --no-audit --no-fund --loglevel=error; \
	else echo "npm not found: bench_crawl_waste.py needs docsify"; fi

# The real apps bench/bench_apps.py serves: docsify's documentation and AngularJS PhoneCat from
# their repositories at the commits it measures, their libraries from npm.
bench/real_apps/checkouts/.fetched: bench/real_apps/fetch.sh
	sh bench/real_apps/fetch.sh && touch $@

bench/real_apps/node_modules/.package-lock.json: bench/real_apps/package-lock.json
	npm ci --prefix bench/real_apps --ignore-scripts --no-audit --no-fund --loglevel=error

bench-apps: bench/real_apps/checkouts/.fetched bench/real_apps/node_modules/.package-lock.json

# Every bench but bench_scale.py, which measures the local PostgreSQL over TCP, runs in a
# network namespace of its own, loopback alone (bench/loopback.sh; BENCH_NETWORK=host runs
# them on the machine's network instead, where a namespace cannot be made).
bench: chromium tests/corpus/apps/node_modules/.package-lock.json bench/prerender/node_modules/.package-lock.json \
		tests/corpus/devices/node_modules/.package-lock.json \
		tests/corpus/webcomponents/node_modules/.package-lock.json \
		bench/docs_spa/node_modules/.package-lock.json bench-apps
	@for f in bench/bench_*.py; do echo "== $$f"; case $$f in \
		*/bench_scale.py) $(BIN)/python $$f ;; \
		*) sh bench/loopback.sh $(BIN)/python $$f ;; esac || exit 1; done

clean:
	rm -rf $(VENV) $(FLOORS) .pytest_cache
