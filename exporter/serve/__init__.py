"""Serving the latest snapshot: the exposition, the HTTP server and its guards, content negotiation, the web
config (TLS, basic auth), the progress API. Nothing here calls a source."""
