# Two commands do everything on a fresh machine:
#   make demo   a simulated 8 x H100 node touring failure scenarios, watched by the exporter, a real
#               Prometheus with the alert rules and a real Alertmanager whose pages are printed; one
#               tour of about thirteen minutes, then it stops (DEMO_ARGS=--loop repeats it until Ctrl-C).
#               It installs the exporter and its runtime dependencies into .venv (pip), and Prometheus and
#               Alertmanager with apt-get as root (scripts/install-tools.sh demo); without root, the
#               exporter runs alone
#   make test   lint + the whole test suite (installs what it needs, every tool of the tests; CI runs
#               exactly this)

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PORT ?= 9612

.PHONY: demo demo-prometheus tools test lint format artifacts protos bench bench-quick bench-detection bench-sensitivity bench-peer clean

# the test toolchain (pytest, ruff, linters, schemas) and the trackers' extras, whose readers the tests run:
# what make test needs
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check -e '.[dev,mlflow,wandb]'
	touch $@

# the exporter and its runtime dependencies only: what the demos need
$(VENV)/.runtime: pyproject.toml
	@echo "demo: pip install -e . into $(VENV) (the exporter and its runtime dependencies; no root)"
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check -e .
	touch $@

tools:
	./scripts/install-tools.sh

demo: $(VENV)/.runtime
	-@./scripts/install-tools.sh demo
	$(BIN)/python scripts/demo.py --port $(PORT) $(DEMO_ARGS)

# a Prometheus loaded with two days of a simulated fleet in dcgm-exporter's names, diagnosed by namespace
# (DEMO_ARGS="--days 7 --nodes 4": a week of four nodes, 2.5 GB while it runs)
demo-prometheus: $(VENV)/.runtime
	-@./scripts/install-tools.sh demo
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
