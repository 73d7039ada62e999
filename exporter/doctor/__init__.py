"""The node doctor: seed 002's bring-up checklist and seed 003's findings as checks that print pass /
warn / fail with evidence and a fix (``gpu-bottleneck-exporter doctor``), and run live in the exporter.

gather.py reads the node through the exporter's sources; checks.py judges (pure functions); render.py
prints; live.py runs the checks on their own thread for the sampler to publish.
"""
