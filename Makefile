# Two commands do everything on a fresh machine:
#   make demo   a simulated 8 x H100 node touring failure scenarios, watched by the exporter, a real
#               Prometheus with the alert rules and a real Alertmanager whose pages are printed; one
#               tour of about thirteen minutes, then it stops (DEMO_ARGS=--loop repeats it until Ctrl-C)
#   make test   lint + the whole test suite (installs what it needs; CI runs exactly this)

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PORT ?= 9612

.PHONY: demo demo-prometheus tools test lint format artifacts protos bench bench-quick bench-detection bench-sensitivity bench-peer clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check -e '.[dev]'
	touch $@

tools:
	./scripts/install-tools.sh

demo: $(VENV)/.installed
	-./scripts/install-tools.sh
	$(BIN)/python scripts/demo.py --port $(PORT) $(DEMO_ARGS)

# a Prometheus loaded with a week of a simulated fleet in dcgm-exporter's names, diagnosed by namespace
demo-prometheus: $(VENV)/.installed
	$(BIN)/python scripts/demo_prometheus.py $(DEMO_ARGS)

test: $(VENV)/.installed tools
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
	$(BIN)/python -m devtools.artifacts

protos: $(VENV)/.installed
	$(BIN)/python -m grpc_tools.protoc -I . --python_out=. --grpc_python_out=. exporter/sources/podresources/v1/api.proto

bench: $(VENV)/.installed
	$(BIN)/python bench/core.py
	$(BIN)/python bench/detection.py
	$(BIN)/python bench/doctor.py
	$(BIN)/python bench/podlogs.py

bench-detection: $(VENV)/.installed
	$(BIN)/python bench/detection.py

bench-sensitivity: $(VENV)/.installed  # hours: every threshold the analysis reads, moved either way
	$(BIN)/python bench/sensitivity.py --jobs 2 --write-docs

bench-quick: $(VENV)/.installed
	$(BIN)/python bench/core.py --quick

bench-peer: $(VENV)/.installed  # side by side with nvitop-exporter 1.7.2 (pip installs it into .bench-venv/)
	$(BIN)/python bench/peer_cpu.py
	$(BIN)/python bench/exposition.py

clean:
	rm -rf $(VENV) .tools .pytest_cache .ruff_cache *.egg-info
