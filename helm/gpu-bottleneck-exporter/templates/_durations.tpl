{{- /* generated from exporter/config/settings.py's DURATION_RANGES by `make artifacts`; do not edit */ -}}
{{- define "gbe.durationRanges" -}}
exporter.interval: {"low": 0.05, "lowAllowed": true, "high": 3600.0, "why": "below 50 ms the NVML reads of a busy node take the whole period"}
exporter.window: {"low": 0.05, "lowAllowed": true, "high": 3600.0, "why": "an hour of samples per GPU is what the analysis can hold in memory"}
exporter.collectTimeout: {"low": 0.0, "lowAllowed": false, "high": 600.0, "why": "a collection still running after ten minutes is lost"}
{{- end -}}
