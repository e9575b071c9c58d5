# evalpipe: `make demo` scores the demo corpus on the embedded service; `make test` runs the suite.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup test demo lint bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

test: setup lint
	$(BIN)/python -m pytest -q

demo: setup
	$(BIN)/evalpipe run configs/demo.yaml --restart --progress-interval 5

bench: setup
	$(BIN)/python bench/run_all.py

clean:
	rm -rf $(VENV) out .pytest_cache
