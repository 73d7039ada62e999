"""``replay --prometheus``: the GPU history a Prometheus (or VictoriaMetrics) already holds, judged by
the same analysis as a recorded trace."""
