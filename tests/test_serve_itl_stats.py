"""The statistics of ``benchmarks/serve_itl.py`` against numpy (no server, no timing)."""

from __future__ import annotations

import importlib
import random
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("httpx", reason="httpx is not installed")

BENCHMARKS = str(Path(__file__).resolve().parent.parent / "benchmarks")


@pytest.fixture(scope="module")
def itl() -> Any:
    sys.path.insert(0, BENCHMARKS)
    try:
        return importlib.import_module("serve_itl")
    finally:
        sys.path.remove(BENCHMARKS)


def test_percentile_and_gaps_match_numpy(itl: Any) -> None:
    rng = random.Random(3)
    for n in (1, 2, 7, 100, 1001):
        xs = [rng.expovariate(1.0) for _ in range(n)]
        for q in (0, 50, 99, 100):
            assert itl.percentile(xs, q) == pytest.approx(float(np.percentile(xs, q)))
    streams = [[0.0, 0.01, 0.5], [], [2.0], [1.0, 1.25]]
    assert itl.gaps_ms(streams) == pytest.approx([10.0, 490.0, 250.0])
    assert itl.itl_summary([])["p99_ms"] is None


def test_histogram_quantile_falls_in_the_true_quantiles_bucket(itl: Any) -> None:
    """From a /metrics page of samples, each estimate lies in the bucket holding numpy's exact
    quantile of those samples (the most a histogram can say)."""
    rng = random.Random(5)
    xs = [rng.lognormvariate(-4.0, 1.0) for _ in range(5000)]
    bounds = [*itl.BUCKETS_S, float("inf")]
    page = "\n".join(
        f'{itl.METRIC}engine="0",le="{"+Inf" if b == float("inf") else b}"}} '
        f"{sum(x <= b for x in xs)}.0"
        for b in bounds
    )
    cum = itl.parse_buckets("# HELP x\n" + page + "\nvllm:other 1\n")
    assert cum[float("inf")] == len(xs)
    for q in (0.5, 0.9, 0.99):
        exact = float(np.quantile(xs, q))
        hi = min(b for b in bounds if b >= exact)
        lo = max([0.0, *(b for b in bounds if b < exact)])
        assert lo <= itl.histogram_quantile(cum, q) <= hi
    assert itl.histogram_quantile({}, 0.5) is None
