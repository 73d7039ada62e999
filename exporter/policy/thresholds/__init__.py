"""The threshold table: every number the analysis, the alert rules, the dashboards and the Helm values
use, each with the reason it has that value. Generated artifacts read this package; nothing else types
these numbers again (a test fails when a generated file disagrees with it).

Keys are dotted: ``area.name``. Units: ratio (0-1), celsius, seconds, watts, bytes, bytes_per_second,
count, per_minute. One module per concern, each registering its entries into the one table of
``registry.py``; this package re-exports every name, so ``from exporter.policy.thresholds import X``
reads any of them. The modules are imported in the order below, and that order is the table's
(docs/thresholds.md lists the entries in it): a new entry goes at the end of its concern's module.
"""

# isort: off
from .registry import Choice, GiB, Threshold, choices, table  # noqa: F401
from .classic import *  # noqa: F403  the classic table: the numbers operators know
from .analysis import *  # noqa: F403  the analysis' step, evidence window and hysteresis
from .ledger import *  # noqa: F403  the time ledger and the detectors that read its evidence
from .podlogs import *  # noqa: F403  what the training's own log says
from .workload import *  # noqa: F403  the workload class: servers, pipelines, interactive sessions
from .health import *  # noqa: F403  the exporter's own health and its behaviour under faults
from .replay import *  # noqa: F403  replay: gaps, the report, the command line, a trace cell's bounds
from .serving import *  # noqa: F403  HTTP, --web.config.file, log lines, series budget, GPU processes
from .jobs import *  # noqa: F403  jobs across nodes: recording rules and job alerts
from .cost import *  # noqa: F403  what a GPU-hour costs
from .alerts import *  # noqa: F403  each alert's `for` and severity
from .doctor import *  # noqa: F403  the node doctor; the pod logs' alerts; critical XIDs
from .boards import *  # noqa: F403  what each board is: NVLinks, NVSwitch, power, framebuffer
# isort: on
