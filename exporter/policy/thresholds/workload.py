"""The workload class: what a GPU's idle time means depends on what the job is (a server, a pipeline,
an interactive session).
"""

from __future__ import annotations

from .registry import _t

# ---- the workload class: what a GPU's idle time means depends on what the job is -------------------

STARVATION_SUSTAINED = _t(
    "starvation.sustained_share",
    0.2,
    "ratio",
    "A starvation verdict starts only while a fifth of the last two minutes went to input waits, or a "
    "fifth of the last half minute in waits that recur across it (three or more, in both its halves: "
    "step-sized waits, not one pause): a job at 86 % utilization with a 5-10 s pause every minute or two "
    "(evaluation scoring, the next subset loading) books 5-15 % in single pauses and runs at nearly full "
    "speed, nothing a person should be woken for (a real evaluation on a 4090 paged twice at 15 %), "
    "while a job losing a third of its time in step-sized waits shows it within half a minute...",
)
STARVATION_HEAVY = _t(
    "starvation.heavy_share",
    0.3,
    "ratio",
    "...and, past the half minute's rhythm, a fifth of the last five minutes too unless the last two "
    "lost 30 % or more: a minute at half speed in a 48-minute evaluation (a real one on a 4090 dipped "
    "to 50 % for a minute while it loaded a subset, a fifth of two minutes but a tenth of five) is a "
    "phase. The gate holds a firing verdict too: when neither the rhythm nor the shares carry it any "
    "more, it resolves instead of riding the two minutes' share it left behind.",
)
SERVING_RESERVED = _t(
    "workload.serving_reserved_ratio",
    0.85,
    "ratio",
    "An inference server reserves its KV cache up front (vLLM: 90 % of the framebuffer by default; TGI, "
    "SGLang likewise) and never gives it back: 85 % or more of the framebuffer held (sharp above, "
    "fragile: a line over vLLM's 90 % misses its servers and calls their quiet gaps starvation)...",
)
SERVING_FLAT = _t(
    "workload.serving_memory_flat_ratio",
    0.01,
    "ratio",
    "...unchanged within 1 % of the framebuffer while it is held (a pre-allocated pool, not a caching "
    "allocator growing with batches)..."
    " Dead on every set: every server's pool is flat to the MiB and every training job's memory moves "
    "by GiB.",
)
SERVING_QUIET = _t(
    "workload.serving_quiet_seconds",
    10.0,
    "seconds",
    "...and the GPU idle for longer than a step-level wait while holding it (no request came): one quiet "
    "stretch, counted toward a server's cycles (workload.serving_cycles). A training job waits for its "
    "input in step-sized gaps. In replay `--workload` or the process table says it for certain, live the "
    "pod's log does. "
    "Sharp (fragile) by design: it is the pause allowance (starvation.pause_seconds), the longest wait a "
    "loop's step may have, so a line above it leaves quiet gaps that are neither a server's nor a step's.",
)
SERVING_CYCLES = _t(
    "workload.serving_cycles",
    4,
    "count",
    "Reserved and flat memory alone says nothing of the class: a training job holds its memory as flat. A "
    "server is known by its shape once four quiet stretches have come while it held the reservation (three "
    "cycles: fewer cannot show how they vary), their lengths or the cycles between them varying like "
    "arrivals (workload.interactive_irregularity), not at whole multiples of one period (a loop's saves); "
    "or by a reservation it made at its start and sat quiet on at once (a KV cache waiting for its first "
    "request, workload.serving_pending_seconds). One quiet stretch after minutes of flat-out compute is a "
    "job that stopped, and a GPU whose peers wait in a collective while it stops is a rank of their job.",
)
SERVING_PENDING = _t(
    "workload.serving_pending_seconds",
    120.0,
    "seconds",
    "A GPU whose framebuffer was reserved flat at that share is not called starved in its first two "
    "minutes unless it keeps working: a server goes quiet between its first requests within seconds "
    "(a real vLLM replay paged starvation at 49 s before its shape was known), a training job that "
    "starves keeps its rhythm and pages at most two minutes later; a reservation older than that "
    "changes nothing."
    " Dead at a quarter on every set, it acts at a half (docs/thresholds.md says how): the examples "
    "sit well clear of it.",
)
SERVER_LOAD_FRESH = _t(
    "workload.server_load_fresh_seconds",
    30.0,
    "seconds",
    "An inference server's load line (vLLM's engine stats every 5-10 s, SGLang's per batch) says how "
    "many requests wait only while it is recent: servers stop printing when idle, so a line older than "
    "half a minute says nothing about now.",
)
PIPELINE_TURNS_SUM = _t(
    "workload.pipeline_sum_ratio",
    0.5,
    "ratio",
    "A model split layer-wise over several GPUs computes on one stage at a time: the job's utilizations "
    "sum to about one GPU's (real 3- and 4-stage splits of 40B and 70B models: 0.88-0.99). Between half "
    "a GPU...",
)
PIPELINE_TURNS_SUM_MAX = _t(
    "workload.pipeline_sum_max_ratio",
    1.25,
    "ratio",
    "...and a quarter more than one (a hand-over keeps two stages busy for a moment). Eight ranks "
    "starving on host offload at a fifth each sum to 1.5, and are no pipeline.",
)
PIPELINE_TURNS_CV = _t(
    "workload.pipeline_sum_cv",
    0.5,
    "ratio",
    "...and that sum steady, its coefficient of variation second to second under 0.5: someone is always "
    "busy. Data-parallel ranks starving together move as one (the sum swings from none to all: 1-2 on "
    "real offload and loader-bound traces), so they never look like turns."
    " Dead on every set: the splits' sums are steady far under it and data-parallel ranks swing far "
    "over it.",
)
PIPELINE_STAGE_MAX = _t(
    "workload.pipeline_stage_util_ratio",
    0.6,
    "ratio",
    "Each stage busy well under full, at most 60 % of the time on average (a 2-stage split at 50 %, a "
    "4-stage one at 16-27 %)."
    " Dead on every set: the splits' stages sit at 16-50 %, training's ranks far above.",
)
PIPELINE_MIN_STAGES = _t(
    "workload.pipeline_min_gpus",
    3.0,
    "count",
    "Turns are called on three GPUs of a job or more. Two ranks of a data-parallel job waiting together "
    "on a slow all-reduce read like two stages at 1 s (a real gloo-bound pair sits at 24 % each, summing "
    "to half a GPU, steadily); three or more ranks moving together make their sum swing, three stages "
    "taking turns keep it level. A two-stage split is judged as training.",
)
PIPELINE_TOGETHER = _t(
    "workload.pipeline_together_ratio",
    0.75,
    "ratio",
    "Where samples are finer than the work (0.1 s logs, the driver's own samples), who is busy when "
    "shows: ranks of one job compute at the same moments, so nearly all of a rank's busy samples meet "
    "another GPU busy (a synthetic 10 Hz offload job: all of them); stages hand over, and meet another "
    "busy only where a sample period straddles a hand-over (a real 3-stage Falcon-40B split at 0.1 s: "
    "about half). More than three quarters together: ranks, not turns."
    " Dead on every set: only three examples are fine enough to read it, and they sit far from it "
    "(turns about half, ranks all).",
)
INTERACTIVE_IDLE_SHARE = _t(
    "workload.interactive_idle_share",
    0.5,
    "ratio",
    "A GPU alone in its job is interactive by its shape when stretches without work, each longer than a "
    "step-level wait (the pause allowance), hold half its time or more since the first of them began: a "
    "notebook computes for tens of seconds per cell and waits minutes for its user. A training job's "
    "saves, even frequent ones, are a fraction of its time (sharp above, fragile: a real image-generation "
    "session idled just over half its time between prompts)...",
)
INTERACTIVE_STRETCHES = _t(
    "workload.interactive_stretches",
    4,
    "count",
    "...and four such stretches have come (three cycles: fewer cannot show how they vary); until then no "
    "starvation verdict starts on it...",
)
FLOOR_DRAW = _t(
    "workload.floor_draw",
    0.1,
    "ratio",
    "A second of a GPU held alone that stays under the busy line and draws within a tenth of its power "
    "envelope's headroom above the idle floor did no work of its job, whatever the utilization reads: a "
    "card that drives a display shows its desktop's rendering (a compositor, a browser tab) as 10-45 % "
    "utilization at a few watts over idle, and a job's kernels at that duty draw past a tenth. Such seconds "
    "count as stretches without work for the interactive shape once the job's work has drawn half its "
    "headroom (below).",
)
LIFTED_DRAW = _t(
    "workload.lifted_draw",
    0.5,
    "ratio",
    "A GPU held alone whose work has drawn half its power envelope's headroom or more computes in bursts "
    "(a cell, an image generated): the seconds at the idle floor between them are the job waiting, not "
    "its work. A loop starved by its host never lifts its draw that far, and its low duty stays work."
    " Dead at a quarter on every set, it acts at a half (docs/thresholds.md says how): the examples "
    "sit well clear of it.",
)
INTERACTIVE_IRREGULAR = _t(
    "workload.interactive_irregularity",
    0.3,
    "ratio",
    "...and their lengths or the cycles between them vary by 30 % or more (coefficient of variation): a "
    "person's thinking between cells varies by half or more, a training loop saves every so many steps, "
    "its cycles alike within a few percent and its saves within a fifth (a shared filesystem's write time "
    "varies). Stretches that came alike mark the GPU as a loop for as long as its job holds it.",
)
INTERACTIVE_WINDOW = _t(
    "workload.interactive_window_seconds",
    900.0,
    "seconds",
    "The stretches counted are those of the last quarter hour: a person's cells and the thinking between "
    "them come every one to five minutes.",
)
LOOP_ALIASED_CYCLES = _t(
    "workload.loop_aliased_cycles",
    16,
    "count",
    "Stretches that vary are a loop's all the same when the cycles between them come as whole multiples "
    "of one period: a step's burst shorter than the sampling period shows only in the samples that "
    "overlap it (utilization is the share of a sample's window a kernel ran), so a 20 s loop sampled "
    "every 2 s misses some bursts and reads cycles of 20, 40 and 60 s. Judged over sixteen cycles or "
    "more (a loop of up to a minute a step shows them in the quarter hour of stretches kept): arrivals "
    "(Poisson gaps) then pass the two tests below together about once in a thousand windows...",
)
LOOP_MULTIPLE_TOLERANCE = _t(
    "workload.loop_multiple_tolerance",
    0.2,
    "ratio",
    "...a cycle within a fifth of the period of a whole multiple of it is one: a loop's steps vary by a "
    "few percent and a sample period of jitter, while the gaps of arrivals (exponential) land that near "
    "a multiple of any period at most 36 % of the time..."
    " Dead on every set: the one slow loop it reads (a real evaluation, 2 s samples) lands its cycles "
    "well inside the band; arrivals land far outside (tests/analysis/test_evidence.py feeds 50 "
    "Poisson logs).",
)
LOOP_PERIOD_SHARE = _t(
    "workload.loop_period_share",
    0.33,
    "ratio",
    "...the period is the cycle of the shorter half that most cycles lie within a fifth of (the steps "
    "whose burst a sample caught), and a third of the cycles must: a loop sampled so that it shows half "
    "its bursts has half its cycles there, while no fifth-wide band holds more than 15 % of exponential "
    "gaps...",
)
LOOP_MULTIPLE_SHARE = _t(
    "workload.loop_multiple_share",
    0.67,
    "ratio",
    "...and two thirds of the cycles so are a loop's (a real evaluation loop with a single loader worker, "
    "sampled every 2 s: three quarters)."
    " Dead on every set, as the tolerance above.",
)
LOOP_CYCLE_CV = _t(
    "workload.loop_cycle_cv",
    0.35,
    "ratio",
    "A job no word and no shape has classed pages starvation only on evidence that it is a loop and not a "
    "server between requests. A loop's cycles (a step and its wait, from one dip's start to the next) come "
    "alike: the step's compute is fixed and so, mostly, is the wait for the same batch size, so they vary "
    "by well under a third; a server's work follows its arrivals, whose gaps vary as much as their mean "
    "(Poisson: coefficient of variation 1; a gamma of shape k: 1/sqrt(k), under 0.35 only from k = 8, a "
    "clock rather than traffic). Cycles varying under 35 % are a loop's...",
)
LOOP_MIN_CYCLES = _t(
    "workload.loop_min_cycles",
    3,
    "count",
    "...measured over three cycles of the evidence window or more (two say nothing of how they vary)...",
)
LOOP_STEADY_CV = _t(
    "workload.loop_steady_cv",
    0.3,
    "ratio",
    "...or a utilization that holds within 30 % of its mean sample to sample: steps shorter than a sample "
    "period read as their steady share of compute (a loop fetching each batch over the network sat at "
    "40-50 % for minutes), while a server at a quarter load reads 0 between requests and near full in a "
    "burst (coefficient of variation 1 or more)."
    " Dead at a quarter on every set, it acts at a half (docs/thresholds.md says how): the steady loops "
    "it reads hold well inside it and servers swing past 1.",
)
PIPELINE_HOLD = _t(
    "workload.pipeline_hold_seconds",
    60.0,
    "seconds",
    "The turns must hold over a minute of the job before the class is decided (from a sixth of it they "
    "hold off a starvation page): a layer split takes turns from its first batch on (real 3- and 4-stage "
    "splits: the sum steady within seconds of the first inference), and a warm-up or one slow batch lasts "
    "seconds; two minutes let the turns page starvation before the class was known."
    " Dead on every set: a split's turns hold from its first batch, so its class is decided long "
    "before any page could come.",
)
WORKLOAD_LOG_LINES = _t(
    "workload.log_lines",
    3.0,
    "count",
    "A class from a pod's log needs three of its lines saying it (any of the table's lines for that "
    "class): one line proves nothing (a training job's request logger, an echoed command, a quoted "
    "line), and the serving class settles for good and turns a starving trainer's input waits into idle "
    "capacity. Servers say so by the dozen (load lines every few seconds, an access line per request, "
    "TGI's every line); a server that prints a single start-up line (Triton's two, SGLang's one) is "
    "still known by its processes' and pod's names.",
)
