# Quick start: `make demo` runs the main job on the fixture, `make test` runs the tests.
# Both create .venv with Python 3.11 (or python3), install the package and compile its kernels first.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
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

test: $(BIN)/.installed
	$(BIN)/python -m pytest -q

lint: $(BIN)/.installed
	$(BIN)/ruff check .

ui: $(BIN)/.installed
	$(BIN)/dagster dev -w workspace.yaml -h 127.0.0.1 -p 3000

clean:
	rm -rf output .webdedup .tmp_dagster_home_*
