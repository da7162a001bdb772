# Quick start: `make demo` runs the main job on the fixture, `make test` runs the tests.
# Both create .venv with Python 3.11 (or python3), install the package and compile its kernels first.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
# The Dagster instance (run history, registered crawl months) of `make ui`; kept between sessions.
DAGSTER_HOME ?= $(CURDIR)/.dagster_home
# dagster 1.13 warns at every start that `dagster dev` is superseded by `dg dev` (the dagster-dg-cli
# package, not installed here); `dagster dev` is what this project runs.
DEV_WARNINGS := ignore:Function `dev_command` is superseded
BIN := $(VENV)/bin

.PHONY: demo test lint ui install clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	$(BIN)/python -m webdedup_assets.core.kernel.warm
	touch $@

install: $(BIN)/.installed

demo: $(BIN)/.installed
	$(BIN)/webdedup run fixtures/documents.csv --output output

# Two workers: every test keeps its files in its own tmp_path and its servers on free ports.
test: $(BIN)/.installed
	$(BIN)/python -m pytest -q -n 2

lint: $(BIN)/.installed
	$(BIN)/ruff check .

# dagster dev runs in DAGSTER_HOME (a dagster.yaml in its working folder that is not DAGSTER_HOME's is
# ignored, with a warning): the checkout's dagster.yaml is copied there, and the storage and output
# folders stay the checkout's.
ui: $(BIN)/.installed
	mkdir -p $(DAGSTER_HOME)
	test -e $(DAGSTER_HOME)/dagster.yaml || cp dagster.yaml $(DAGSTER_HOME)/dagster.yaml
	cd $(DAGSTER_HOME) && DAGSTER_HOME=$(DAGSTER_HOME) PYTHONWARNINGS='$(DEV_WARNINGS)' \
		WEBDEDUP_STORAGE_ROOT=$${WEBDEDUP_STORAGE_ROOT:-$(CURDIR)/.webdedup/storage} \
		WEBDEDUP_OUTPUT_DIR=$${WEBDEDUP_OUTPUT_DIR:-$(CURDIR)/.webdedup/output} \
		$(CURDIR)/$(BIN)/dagster dev -w $(CURDIR)/workspace.yaml -h 127.0.0.1 -p 3000

clean:
	rm -rf output .webdedup .tmp_dagster_home_*
