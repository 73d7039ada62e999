"""Serving: what one HTTP client may hold of the server, what --web.config.file may be, repeated log
lines, the series budget, the GPU processes exported.
"""

from __future__ import annotations

from .registry import _t

# HTTP: what one client may hold of the server
HTTP_MAX_CONNECTIONS = _t(
    "http.max_connections",
    1024.0,
    "count",
    "Prometheus holds one connection per scraper; 1024 open connections (a few MiB of buffers) let "
    "hundreds of slow clients wait out their header deadline without closing anyone early. Past it "
    "(or past the process's descriptor limit less a reserve), the oldest connection that has not sent "
    "a request yet is closed for the new one.",
)
HTTP_HEADER_TIMEOUT = _t(
    "http.header_timeout_seconds",
    5.0,
    "seconds",
    "A scraper sends its whole request (and finishes a TLS handshake) within milliseconds; a connection "
    "without a complete request header after 5 s is a slow or half-open client and is closed.",
)
HTTP_KEEPALIVE = _t(
    "http.keepalive_seconds",
    30.0,
    "seconds",
    "An idle kept-alive connection is closed after 30 s: longer than the usual 15-30 s scrape interval "
    "would be held idle for nothing; shorter ones reuse the connection.",
)
# --web.config.file: what the file may be, what a login may cost
WEB_MAX_FILE_BYTES = _t(
    "web.max_file_bytes",
    float(1 << 20),
    "bytes",
    "A web config is a few hundred bytes (a certificate's paths, a few users' 60-byte hashes); 1 MiB only "
    "keeps a wrong path (a log, a device) from being read whole.",
)
WEB_MAX_DEPTH = _t(
    "web.max_depth",
    10.0,
    "count",
    "The deepest setting of a web config sits 3 mappings down (http_server_config, headers, a header); "
    "10 still names a misplaced block at its line, and keeps the YAML parser far from Python's recursion "
    "limit (a file of 10,000 nested brackets killed the server on SIGHUP).",
)
WEB_BCRYPT_MAX_COST = _t(
    "web.bcrypt_max_cost",
    14.0,
    "count",
    "One bcrypt check at cost 14 takes about 1 s on a server core (cost 10: 60 ms; each step doubles), "
    "and the first scrape after a start or a password change pays one, inside Prometheus' default 10 s "
    "scrape timeout; cost 16 would take 4 s of it, and cost 31 (the format's maximum) about 35 hours, "
    "hanging the start while the dummy hash is made.",
)
WEB_AUTH_CHECKS = _t(
    "web.auth_checks_at_once",
    2.0,
    "count",
    "bcrypt checks run off the event loop, at most 2 at a time: a flood of guesses costs the node at most "
    "2 cores and waits its turn, while the loop keeps answering remembered logins and probes.",
)
WEB_AUTH_WAIT = _t(
    "web.auth_wait_seconds",
    10.0,
    "seconds",
    "A login whose bcrypt check cannot start within 10 s (Prometheus' default scrape timeout) behind "
    "other checks is answered 503 unchecked: its scraper has given up by then, and a flood that stops "
    "leaves at most 10 s of checks behind.",
)
WEB_AUTH_VERIFIED = _t(
    "web.auth_verified_cache",
    64.0,
    "count",
    "The last 64 verified (user, password) pairs are remembered by keyed digest, across a re-read that "
    "leaves the user's hash unchanged: a scraper pays one bcrypt check, not one per scrape, and a flood "
    "of wrong passwords cannot push it out (only verified pairs enter). 64 covers every Prometheus "
    "replica and user a node is scraped by.",
)
WEB_AUTH_FAILED = _t(
    "web.auth_failure_cache",
    4096.0,
    "count",
    "The last 4096 wrong (user, password) pairs are remembered by keyed digest (about 0.5 MiB), so a "
    "client repeating a wrong password (a scraper with a stale secret, a flood of one guess) costs one "
    "bcrypt check, not one per request; each distinct guess still costs one.",
)
HTTP_BODY_TIMEOUT = _t(
    "http.body_timeout_seconds",
    5.0,
    "seconds",
    "A request body here is a progress report under 1 KiB, sent with its header; a body not all there "
    "5 s after its header is a stalled client and its connection is closed (before this deadline one "
    "stalled body held its connection 70 s).",
)
HTTP_MAX_BODY_CONNECTIONS = _t(
    "http.max_body_connections",
    16.0,
    "count",
    "Connections still sending a request body (progress reports; scrapes carry none) share 16 slots: a "
    "node's jobs report from rank 0 every few seconds, each in milliseconds, so 16 at once is already a "
    "flood. Past it the oldest still sending is closed for the new one, and the rest of the connections "
    "stay for scrapes (1,100 stalled reports used to hold all 1,024 and fail every scrape).",
)
HTTP_SEND_TIMEOUT = _t(
    "http.send_timeout_seconds",
    10.0,
    "seconds",
    "An answer is written in 64 KiB pieces as the client takes them; a connection whose client takes "
    "nothing of what waits for it for 10 s (its write buffer stays over asyncio's 64 KiB high-water mark, "
    "or the end of its answer is still in the kernel's send queue) is closed, and what it held is freed. "
    "A scraper takes a 4 MB exposition in milliseconds inside a cluster, and Prometheus gives up on a "
    "scrape after its 10 s scrape_timeout anyway.",
)
HTTP_MAX_STALLED_CONNECTIONS = _t(
    "http.max_stalled_connections",
    256.0,
    "count",
    "A connection not taking its answer holds about 220 KiB of it: up to 128 KiB in the process (the "
    "write buffer's high-water mark and one 64 KiB piece) and the kernel's 128 KiB send buffer. 256 of "
    "them hold about 56 MiB, inside the chart's 256 MiB limit. Past it the oldest is closed for the new "
    "one. Before these bounds 200 clients that never read a 4 MB exposition took the process from 107 "
    "to 595 MiB (437 MiB after they left) and the kernel's socket buffers to 752 MiB; now 100 to 141 "
    "MiB (120 after) and 26 MiB (bench/slow_readers.py).",
)
HTTP_TLS_HANDSHAKE_TIMEOUT = _t(
    "http.tls_handshake_timeout_seconds",
    3.0,
    "seconds",
    "A TLS handshake is two round trips and a signature, milliseconds inside a cluster; one not finished "
    "in 3 s is a stalled client and its connection is closed. The request header must still arrive "
    "within http.header_timeout_seconds of the connection's start.",
)
HTTP_TLS_MAX_CONNECTIONS = _t(
    "http.tls_max_connections",
    1024.0,
    "count",
    "An open TLS connection holds OpenSSL's state and a 16 KiB read buffer, about 40 KiB (1,100 idle TLS "
    "connections took the exporter from 70 to 110 MiB; with asyncio's 256 KiB buffer they took it to 400 "
    "MiB): 1,024 of them keep an 8-GPU node's exporter, about 100 MiB, well under the chart's 256 MiB "
    "memory limit. Past it the oldest TLS connection without a request is closed for the new one; a "
    "lower bound would only make a flood cycle faster, through more handshakes.",
)
HTTP_TLS_HANDSHAKES_PER_TURN = _t(
    "http.tls_handshakes_per_turn",
    8.0,
    "count",
    "Each step of a TLS handshake (the key exchange and signature when the client's hello arrives, then "
    "its Finished) takes about 0.3 ms of the event loop that also answers scrapes. 1,100 clients "
    "connecting at once ran hundreds of steps in a turn: the loop lagged up to 135 ms and answering a "
    "scrape took up to 120 ms. At most 8 steps run per turn (2-3 ms); the rest wait, their reads paused, "
    "for the next turns, newest first (a client that just connected is answered first, the oldest meet the "
    "handshake deadline), so the flood costs the same CPU spread over turns (the same burst: "
    "lag up to 56 ms, a scrape answered within 26 ms, on a loaded 2-core machine). Counted per turn, not "
    "as handshakes in progress: a client stalling before or inside its handshake holds no slot.",
)
LOG_REPEAT_BURST = _t(
    "log.repeat_burst",
    5.0,
    "count",
    "The same log line (same logger and message) is written 5 times per interval, then counted: a flood "
    "of one error (116,000 accept errors in 11 s) says nothing the first lines did not.",
)
LOG_REPEAT_INTERVAL = _t(
    "log.repeat_interval_seconds",
    60.0,
    "seconds",
    "After a minute a repeated line is written again, with how many like it were held back.",
)

SERIES_BUDGET = _t(
    "exporter.series_budget",
    480.0,
    "count",
    "The exporter's own series of an 8-GPU node at the default detail, as the real command serves them "
    "(bench/series.py --served; the runtime's 16 apart): 422 on a simulated node at rest, 446 touring the "
    "demo's scenarios, 470 once every GPU has been in each of the ledger's 8 states (a state seen stays a "
    "counter) with a verdict firing on each: about 59 per GPU, a few dozen like dcgm-exporter's default "
    "set. 480 keeps 1,000 nodes under 0.5 M series, what one Prometheus holds comfortably; per-link, "
    "per-pair, per-XID and per-process series are --detail.",
)
SERIES_BUDGET_MIG = _t(
    "exporter.series_budget_mig",
    1100.0,
    "count",
    "Series of an 8-GPU node at the default detail with every GPU in MIG mode at the finest partition "
    "(7 x 1g.10gb per H100, 56 instances held by 56 pods): 976 on the simulator (mig_all_h100), over "
    "exporter.series_budget by 496 because the series follow the instances and their pods, not the GPUs: "
    "each instance its ledger states (1-3) and its two verdicts, about 3.4 (192), each pod 8 (448: its "
    "device, its processes and their memory, its /dev/shm default, and the used and size of its two shm "
    "mounts), the GPUs and the node the other 336. 1,100 leaves each instance two more ledger states; "
    "1,000 such nodes stay near 1.1 M series, and a node of whole GPUs keeps exporter.series_budget.",
)
PROCESS_TOP_N = _t(
    "processes.top_n",
    8.0,
    "count",
    "Per-process series (--detail processes) of the 8 processes holding the most memory on each GPU: a "
    "GPU runs one process per rank, a few under MPS or time-slicing; a node of thousands of short "
    "processes would otherwise grow without bound. The per-pod totals count every process.",
)
PROCESS_COMMAND_CHARS = _t(
    "processes.command_chars",
    96.0,
    "characters",
    "A process's command line is cut to 96 characters for its label: enough for the interpreter, the "
    "script and its first arguments; arguments can be long (a config as JSON) and a label is kept per "
    "series.",
)
PROCESS_OWNERS_REMEMBERED = _t(
    "processes.owners_remembered",
    256.0,
    "count",
    "The pods of the last 256 containers seen holding a GPU are remembered, so a process whose pod and "
    "runtime bundle are gone still names its last pod; a node runs a few dozen GPU containers a day.",
)
