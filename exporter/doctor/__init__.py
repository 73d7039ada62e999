"""The node doctor: the NCCL bring-up checklist and the usual NVSwitch-node faults as checks that print pass /
warn / fail with evidence and a fix (``gpu-bottleneck-exporter doctor``), and run live in the exporter.

gather.py reads the node through the exporter's sources; checks.py judges (pure functions); render.py
prints; live.py runs the checks on their own thread for the sampler to publish.
"""
