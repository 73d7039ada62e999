"""The picture of a `replay --report` page for docs/commands.md: the starving-rank example
(examples/traces/starvation_h100x8.csv.gz) replayed into a report, screenshotted by headless Chromium
at 1400 x 1800 into docs/img/replay-report.png (pngquant shrinks it when installed), and recorded in
docs/img/pictures.json with the hashes of what it was drawn from (scripts/picture_sources.py).

    python scripts/report_picture.py [--out docs/img] [--keep-html FILE]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scripts import picture_sources
from scripts.dashboard_pictures import screenshot

EXAMPLE = picture_sources.REPO / "examples" / "traces" / "starvation_h100x8.csv.gz"
HEIGHT = 1800  # the page of this example, without a blank tail


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=picture_sources.IMG)
    parser.add_argument("--keep-html", type=Path, help="write the report here instead of a temporary file")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gbe-report-picture-") as tmp:
        report = args.keep_html or Path(tmp) / "report.html"
        report.unlink(missing_ok=True)
        subprocess.run(
            [sys.executable, "-m", "exporter", "replay", str(EXAMPLE), "--report", str(report)],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        args.out.mkdir(parents=True, exist_ok=True)
        png = args.out / "replay-report.png"
        screenshot(report, png, HEIGHT)
    if args.out.resolve() == picture_sources.IMG.resolve():
        picture_sources.record(png)
    print(f"{png}: {png.stat().st_size // 1024} KiB", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
