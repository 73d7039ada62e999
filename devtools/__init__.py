"""Development tools that read the checkout and need the ``dev`` extra's dependencies (the Grafana
SDK, PyYAML's dumper...). Not part of the installed package: pyproject's package list names ``exporter*``
only, and no module under exporter/ imports this one (tests/test_packaging.py checks both)."""
