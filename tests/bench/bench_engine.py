"""Benchmark of the placement engine, runnable from the repository root without Django or a database:

    python tests/bench/bench_engine.py --nodes 10000 --jobs 50000 --seed 1
    python tests/bench/bench_engine.py --scale 1000,2000,5000,10000,20000

The same as `python manage.py bench_engine`; both print one JSON object (see `benchmarks/engine.py`).
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.engine import main  # noqa: E402 - after the path is set

if __name__ == "__main__":
    raise SystemExit(main())
