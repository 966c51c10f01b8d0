"""Shrink the browser tests' screenshots into the small PNGs the README shows.

    .venv/bin/pytest tests/web tests/cluster/test_dashboard_scale.py   # makes .test-artifacts/
    .venv/bin/python tools/web/readme_shots.py [NAME.png ...]          # -> docs/screenshots/

Each picture: (source in .test-artifacts/screenshots, width, the height to keep from the
top in source pixels or None for all), saved as a palette PNG (small, still sharp)."""

from __future__ import annotations

import sys
from pathlib import Path

from PIL import Image

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / ".test-artifacts" / "screenshots"
TARGET = ROOT / "docs" / "screenshots"
PICTURES = {
    "jobs.png": ("13-jobs-list", 900, 520),
    "job.png": ("13-job-succeeded", 900, 1720),
    "job-failed.png": ("30-job-failed", 900, 1480),
    "new-job.png": ("11-new-job", 900, 860),
    "replicas-1000.png": ("51-job-1000-pending", 900, 1500),
    "phone-job.png": ("21-phone-job", 300, 1700),
    "result.png": ("50-job-result", 900, 640),
    "compare.png": ("61-compare", 900, None),
    "log-search.png": ("72-log-search-1000-replicas", 900, 1650),
}


def main(names: list[str]) -> int:
    TARGET.mkdir(parents=True, exist_ok=True)
    for name, (source, width, keep) in PICTURES.items():
        if names and name not in names:
            continue
        path = SOURCE / f"{source}.png"
        if not path.exists():
            print(f"missing {path}: run the browser tests first", file=sys.stderr)
            continue
        image = Image.open(path).convert("RGB")
        if keep is not None and image.height > keep:
            image = image.crop((0, 0, image.width, keep))
        height = round(image.height * width / image.width)
        small = image.resize((width, height), Image.LANCZOS).quantize(
            colors=128, dither=Image.Dither.NONE
        )
        small.save(TARGET / name, optimize=True)
        print(f"{name}: {width}x{height}, {(TARGET / name).stat().st_size // 1024} kB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
