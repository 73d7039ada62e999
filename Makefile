# Two commands do everything on a fresh machine:
#   make demo   the exporter on a simulated 8 x H100 node moving through failure scenarios
#   make test   lint + the whole test suite (installs what it needs; CI runs exactly this)

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PORT ?= 9400

.PHONY: demo test lint format artifacts bench bench-quick bench-detection clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check -e '.[dev]'
	touch $@

demo: $(VENV)/.installed
	@echo "gpu-bottleneck-exporter on a simulated 8 x H100 node (scenario: tour)"
	@echo "  metrics: http://localhost:$(PORT)/metrics   health: /healthz /readyz   stop: Ctrl-C"
	$(BIN)/gpu-bottleneck-exporter --simulate tour --port $(PORT)

test: $(VENV)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/pytest

lint: $(VENV)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(VENV)/.installed
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

artifacts: $(VENV)/.installed
	$(BIN)/python -m exporter.artifacts

bench: $(VENV)/.installed
	$(BIN)/python bench/core.py
	$(BIN)/python bench/detection.py

bench-detection: $(VENV)/.installed
	$(BIN)/python bench/detection.py

bench-quick: $(VENV)/.installed
	$(BIN)/python bench/core.py --quick

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache *.egg-info
