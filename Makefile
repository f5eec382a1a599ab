# Every target creates .venv when it is missing (a clean clone needs nothing else).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: dev interop fastmcp-latest hosts browser test lint type bench bench-slow demo docs screenshots sim clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

dev: $(STAMP)

# Peers we did not write (the official MCP TypeScript SDK 1.x and 2.x with ext-tasks, the
# MCP Inspector, the conformance suite), with Node 22 from the npm package `node`; the
# interop, gateway and FastMCP tests need them.
INTEROP_STAMP := interop/node_modules/.installed
$(INTEROP_STAMP): interop/package.json interop/package-lock.json
	cd interop && npm ci --no-audit --no-fund
	touch $(INTEROP_STAMP)

# Python peers that cannot share the dev venv, each in its own venv from its pinned
# requirements: the official MCP Python SDK 1.x (the project needs mcp 2) and fastmcp 4.2
# (the dev venv's fastmcp-tasks pins fastmcp 4.1).
PY_PEERS := interop/py-mcp1 interop/py-fastmcp4
PY_PEER_STAMPS := $(addsuffix /.venv/.installed,$(PY_PEERS))
interop/%/.venv/.installed: interop/%/requirements.txt
	rm -rf interop/$*/.venv
	$(PYTHON) -m venv interop/$*/.venv
	interop/$*/.venv/bin/python -m pip install --quiet -r interop/$*/requirements.txt
	touch $@

interop: $(INTEROP_STAMP) $(PY_PEER_STAMPS)

# The FastMCP integration is tested on two FastMCP lines: the main venv has 4.1.x (the
# last line fastmcp-tasks, the parity peer, exists for); this one has the newest 4.2.x,
# which fastmcp-tasks cannot be installed beside. tests/integrations runs in both.
FASTMCP_LATEST_VENV := .venv-fastmcp-latest
FASTMCP_LATEST_STAMP := $(FASTMCP_LATEST_VENV)/.installed
$(FASTMCP_LATEST_STAMP): pyproject.toml
	$(PYTHON) -m venv $(FASTMCP_LATEST_VENV)
	$(FASTMCP_LATEST_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(FASTMCP_LATEST_VENV)/bin/python -m pip install --quiet -e '.[fastmcp,postgres]' \
	  'fastmcp-slim[server,client]>=4.2,<4.3' 'pytest>=8,<10' 'pytest-xdist>=3.6,<4' \
	  'hypothesis>=6.100,<7'
	touch $(FASTMCP_LATEST_STAMP)

fastmcp-latest: $(FASTMCP_LATEST_STAMP)

# MCP hosts that speak no tasks (langchain-mcp-adapters, pydantic-ai, openai-agents), run
# against the gateway in tests. They need the mcp 1.x SDK; the project needs mcp 2.x, so
# they get a venv of their own.
HOSTS_VENV := interop/hosts/.venv
HOSTS_STAMP := $(HOSTS_VENV)/.installed
$(HOSTS_STAMP): interop/hosts/requirements.txt
	$(PYTHON) -m venv $(HOSTS_VENV)
	$(HOSTS_VENV)/bin/python -m pip install --quiet -r interop/hosts/requirements.txt
	touch $(HOSTS_STAMP)

hosts: $(HOSTS_STAMP)

# The browser the console's tests drive: Debian's chromium (Playwright is pointed at
# /usr/bin/chromium and never downloads a browser). Installed only when missing.
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium \
	    >/dev/null; }

# The suite runs on TEST_WORKERS processes (pytest-xdist; tests/conftest.py says what that
# asks of a test): most tests wait on child processes and sockets, so more workers than
# cores pays. Tests marked `serial` measure the machine: they run afterwards, alone.
# Bytecode is written even where the environment says not to: every test starts
# `python -m longcall` children, which would otherwise compile the package each time.
TEST_WORKERS ?= 4
NO_BYTECODE_OPT_OUT := env -u PYTHONDONTWRITEBYTECODE
PYTEST := $(NO_BYTECODE_OPT_OUT) $(BIN)/python -m pytest -q

test: $(STAMP) $(INTEROP_STAMP) $(PY_PEER_STAMPS) $(FASTMCP_LATEST_STAMP) $(HOSTS_STAMP) browser
	$(PYTEST) -n $(TEST_WORKERS) --dist loadgroup -m "not serial"
	$(PYTEST) -m serial || [ $$? -eq 5 ]
	$(NO_BYTECODE_OPT_OUT) $(FASTMCP_LATEST_VENV)/bin/python -m pytest -q -n 2 --dist loadgroup tests/integrations

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

# The console's browser tests, copying their screenshots to docs/images/console/.
screenshots: $(STAMP) browser
	LONGCALL_DOCS_SCREENSHOTS=1 $(BIN)/python -m pytest -q tests/console

sim: $(STAMP)
	$(BIN)/longcall sim --permutations 10000

clean:
	rm -rf $(VENV) $(FASTMCP_LATEST_VENV) $(HOSTS_VENV) $(addsuffix /.venv,$(PY_PEERS)) \
	  interop/node_modules .pytest_cache .mypy_cache .ruff_cache .hypothesis
