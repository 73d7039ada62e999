"""The same analysis away from a live node: traces and the other GPU logs replay reads (traceformats/),
record, replay on a virtual clock, and the replay's HTML report (report_assets/)."""
