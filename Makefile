# snapshotd: `make run` serves, `make test` tests; both install what is missing first.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
ORIGIN ?=
PORT   ?= 8080

.PHONY: run test lint bench chromium clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

chromium: $(STAMP)
	@PATH="$(CURDIR)/$(BIN):$$PATH" sh scripts/ensure-chromium.sh

run: chromium
	@PATH="$(CURDIR)/$(BIN):$$PATH" sh scripts/run.sh "$(ORIGIN)" "$(PORT)"

test: chromium
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check snapshotd tests bench
	$(BIN)/mypy snapshotd

bench: chromium
	@for f in bench/bench_*.py; do echo "== $$f"; $(BIN)/python $$f || exit 1; done

clean:
	rm -rf $(VENV) .pytest_cache
