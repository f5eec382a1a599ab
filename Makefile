# Every target creates .venv when it is missing (a clean clone needs nothing else).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: dev interop test lint type bench bench-slow demo docs sim clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

dev: $(STAMP)

# Peers we did not write (the official MCP TypeScript SDK and conformance suite), with
# Node 22 from the npm package `node`; the interop tests need them.
INTEROP_STAMP := interop/node_modules/.installed
$(INTEROP_STAMP): interop/package.json interop/package-lock.json
	cd interop && npm ci --no-audit --no-fund
	touch $(INTEROP_STAMP)

interop: $(INTEROP_STAMP)

# The suite runs on TEST_WORKERS processes (pytest-xdist; tests/conftest.py says what that
# asks of a test): most tests wait on child processes and sockets, so more workers than
# cores pays. Tests marked `serial` measure the machine: they run afterwards, alone.
# Bytecode is written even where the environment says not to: every test starts
# `python -m longcall` children, which would otherwise compile the package each time.
TEST_WORKERS ?= 4
PYTEST := env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m pytest -q

test: $(STAMP) $(INTEROP_STAMP)
	$(PYTEST) -n $(TEST_WORKERS) --dist loadgroup -m "not serial"
	$(PYTEST) -m serial || [ $$? -eq 5 ]

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

# The many-workers end-to-end test at full size (CI runs it with 300 operations).
bench-slow: $(STAMP)
	LONGCALL_E2E_OPS=2000 LONGCALL_REQUIRE_PG=1 $(BIN)/python -m pytest -q -s tests/e2e/test_many_workers.py

sim: $(STAMP)
	$(BIN)/longcall sim --permutations 10000

clean:
	rm -rf $(VENV) interop/node_modules .pytest_cache .mypy_cache .ruff_cache .hypothesis
