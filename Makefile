# Every target creates .venv when it is missing (a clean clone needs nothing else).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: dev test lint type bench demo docs sim clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

dev: $(STAMP)

test: $(STAMP)
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check src tests bench scripts
	$(BIN)/ruff format --check src tests bench scripts
	$(BIN)/lint-imports

type: $(STAMP)
	$(BIN)/mypy

docs: $(STAMP)
	$(BIN)/python scripts/gen_state_diagram.py > docs/states.md

demo: $(STAMP)
	$(BIN)/longcall demo

bench: $(STAMP)
	$(BIN)/python -m bench

sim: $(STAMP)
	$(BIN)/longcall sim --permutations 10000

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
