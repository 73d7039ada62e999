"""Cost: what a GPU-hour costs, to price the ledger's lost time."""

from __future__ import annotations

from .registry import Threshold, _c, _t

# ---- cost: what a GPU-hour costs, to price the ledger's lost time ---------------------------------------
# Every price below is an EXAMPLE, not a quote: an on-demand figure in the range public clouds listed per
# GPU in 2024-2025, there so that the cost panels show sensible magnitudes out of the box. Set your own
# (reserved, spot or amortized prices differ by several times) with --price or the chart's cost values.
_EXAMPLE = "Example, not a quote: "
COST_CURRENCY = _c(
    "cost.currency",
    "USD",
    "The currency the example prices are in (ISO 4217 code); it labels every price and cost series.",
)
COST_DEFAULT_PRICE = _t(
    "cost.price.default",
    2.0,
    "per_gpu_hour",
    _EXAMPLE + "a GPU whose model matches no entry below is priced like a mid-range data-center GPU, so "
    "that its lost time still counts; set a price for it.",
)
# model (matched in the NVML name, ignoring case, longest match first) -> its price per GPU-hour
GPU_HOUR_PRICES: dict[str, Threshold] = {
    "H100 80GB HBM3": _t(
        "cost.price.h100_sxm",
        4.0,
        "per_gpu_hour",
        _EXAMPLE + "H100 SXM on demand ran from about 2 to over 10 USD a GPU-hour across "
        "clouds; 4 is mid-way.",
    ),
    "H100 NVL": _t(
        "cost.price.h100_nvl", 3.5, "per_gpu_hour", _EXAMPLE + "a little under the SXM board (400 W, PCIe)."
    ),
    "H100 PCIe": _t(
        "cost.price.h100_pcie", 3.0, "per_gpu_hour", _EXAMPLE + "the PCIe H100 lists below the SXM board."
    ),
    "H200": _t(
        "cost.price.h200", 5.0, "per_gpu_hour", _EXAMPLE + "the H200 lists a quarter or so above the H100."
    ),
    "B200": _t(
        "cost.price.b200", 7.0, "per_gpu_hour", _EXAMPLE + "the B200 lists well above the H200 where offered."
    ),
    "A100-SXM4-80GB": _t(
        "cost.price.a100_sxm_80gb", 2.5, "per_gpu_hour", _EXAMPLE + "A100 80GB on demand: about 2-4 USD."
    ),
    "A100-SXM4": _t(
        "cost.price.a100_sxm_40gb", 2.0, "per_gpu_hour", _EXAMPLE + "the 40 GB A100 lists below the 80 GB."
    ),
    "A100 80GB PCIe": _t(
        "cost.price.a100_pcie_80gb", 2.2, "per_gpu_hour", _EXAMPLE + "the PCIe A100 lists below the SXM one."
    ),
    "L40S": _t("cost.price.l40s", 1.5, "per_gpu_hour", _EXAMPLE + "L40S on demand: about 1-2 USD."),
    "A10G": _t("cost.price.a10g", 1.0, "per_gpu_hour", _EXAMPLE + "A10G instances: about 1 USD a GPU-hour."),
    "L40": _t("cost.price.l40", 1.2, "per_gpu_hour", _EXAMPLE + "the L40 lists a little below the L40S."),
    "L4": _t("cost.price.l4", 0.7, "per_gpu_hour", _EXAMPLE + "L4 on demand: well under 1 USD."),
    "T4": _t("cost.price.t4", 0.5, "per_gpu_hour", _EXAMPLE + "T4 on demand: about half a USD."),
    "V100": _t("cost.price.v100", 2.0, "per_gpu_hour", _EXAMPLE + "V100 on demand: about 2-3 USD."),
}
PRICE_MAX = _t(
    "cost.price_max",
    1000.0,
    "per_gpu_hour",
    "A price above 1,000 a GPU-hour is a typo (a monthly figure, a missing decimal point), not a rate: "
    "refused rather than drawn as a cost that dwarfs every other panel.",
)
PRICE_ENTRIES_MAX = _t(
    "cost.price_entries_max",
    64.0,
    "count",
    "--price lists a few GPU models; 64 entries is room for every board a fleet runs while bounding what "
    "a malformed value (a file pasted in) costs to read.",
)
PRICE_MODEL_CHARS_MAX = _t(
    "cost.price_model_chars_max",
    96.0,
    "count",
    "NVML names a board in at most 96 characters (NVML_DEVICE_NAME_V2_BUFFER_SIZE); a longer model name "
    "can never match.",
)
