"""Mask application on a CUDA device: trierouter's paths vs xgrammar's kernel.

At batch 128 and 256, for 151,936 (Qwen2) and 262,144 (Gemma) wide float32 / bfloat16 logits,
times applying one packed int32 bitmask per row (XGrammar layout) in place:

- ``trierouter``: :func:`trierouter.router.bitmask.apply_token_bitmask_inplace` (dispatches to
  xgrammar's kernel when installed; host bitmask copied to the device each call, as in serving);
- ``torch``: a pure-torch unpack + ``masked_fill_`` (no xgrammar), device-resident bitmask;
- ``xgrammar``: ``xgrammar.apply_token_bitmask_inplace`` with a device-resident bitmask;
- each also with ``indices`` (every other row), as in a batch mixing constrained requests.

Masks are realistic trie masks: a sparse row (a few hundred tokens, mid-value) and a dense row
(the root of a 10,000-value set, thousands of tokens) alternate. Timed with CUDA events, median
of ``--iters`` after warm-up. Writes ``results/gpu_mask_apply.json``. Without a CUDA device it
prints a message and exits with status 0.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent / "results"
BATCHES = (128, 256)
WIDTHS = {"qwen2-151936": 151_936, "gemma-262144": 262_144}


def _torch_apply(logits: Any, bitmask: Any, indices: Any | None) -> None:
    import torch

    shifts = torch.arange(32, device=bitmask.device, dtype=torch.int32)
    rows = logits if indices is None else logits[indices]
    masks = bitmask if indices is None else bitmask[indices]
    bits = ((masks.unsqueeze(-1) >> shifts) & 1).bool().reshape(masks.shape[0], -1)
    blocked = ~bits[:, : rows.shape[1]]
    if indices is None:
        logits.masked_fill_(blocked, float("-inf"))
    else:
        logits[indices] = rows.masked_fill(blocked, float("-inf"))


def _cases(
    logits: Any, host: Any, device_mask: Any, half: list[int], half_t: Any, xgrammar: Any
) -> dict[str, Callable[[], None]]:
    """The timed paths, each a closure over one batch's logits and masks."""
    from trierouter.router.bitmask import apply_token_bitmask_inplace

    half_long = half_t.long()
    cases: dict[str, Callable[[], None]] = {
        "trierouter": lambda: apply_token_bitmask_inplace(logits, host),
        "trierouter_indices": lambda: apply_token_bitmask_inplace(logits, host, indices=half),
        "torch": lambda: _torch_apply(logits, device_mask, None),
        "torch_indices": lambda: _torch_apply(logits, device_mask, half_long),
    }
    if xgrammar is not None:
        cases["xgrammar"] = lambda: xgrammar.apply_token_bitmask_inplace(logits, device_mask)
        cases["xgrammar_indices"] = lambda: xgrammar.apply_token_bitmask_inplace(
            logits, device_mask, indices=half_t
        )
    return cases


def _masks(batch: int, width: int, seed: int) -> Any:
    import numpy as np

    rng = np.random.default_rng(seed)
    words = (width + 31) // 32
    out = np.zeros((batch, words), dtype=np.uint32)
    for r in range(batch):
        n = 300 if r % 2 else 6_000
        ids = rng.choice(width, size=n, replace=False)
        np.bitwise_or.at(out[r], ids >> 5, np.uint32(1) << (ids & 31).astype(np.uint32))
    return out.view(np.int32)


def _time(fn: Callable[[], None], iters: int) -> float:
    import torch

    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(iters):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        samples.append(start.elapsed_time(end) * 1e3)  # µs
    return statistics.median(samples)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=HERE / "gpu_mask_apply.json")
    ap.add_argument("--iters", type=int, default=200)
    args = ap.parse_args()
    try:
        import torch
    except ImportError:
        print("gpu_mask_apply: torch is not installed; nothing to measure")
        return 0
    if not torch.cuda.is_available():
        print("gpu_mask_apply: no CUDA device available; this benchmark needs one (skipped)")
        return 0
    try:
        import xgrammar
    except ImportError:
        xgrammar = None
    dev = torch.device("cuda")
    results: list[dict[str, Any]] = []
    for name, width in WIDTHS.items():
        for batch in BATCHES:
            host = torch.from_numpy(_masks(batch, width, seed=batch)).pin_memory()
            device_mask = host.to(dev)
            half = list(range(0, batch, 2))
            half_t = torch.tensor(half, device=dev, dtype=torch.int32)
            for dtype in (torch.float32, torch.bfloat16):
                base = torch.randn(batch, width, device=dev, dtype=dtype)
                logits = base.clone()

                def reset(lg: Any = logits, b: Any = base) -> None:
                    lg.copy_(b)

                cases = _cases(logits, host, device_mask, half, half_t, xgrammar)
                copy_us = _time(reset, args.iters)
                # correctness: every path masks exactly like the reference
                ref = base.clone()
                _torch_apply(ref, device_mask, None)
                for label, fn in cases.items():
                    reset()
                    fn()
                    if "indices" not in label:
                        same = bool(torch.equal(torch.isinf(logits), torch.isinf(ref)))
                    else:
                        same = bool(torch.equal(torch.isinf(logits[half]), torch.isinf(ref[half])))

                    def run(f: Callable[[], None] = fn) -> None:
                        reset()
                        f()

                    us = _time(run, args.iters) - copy_us
                    results.append(
                        {
                            "vocab": name,
                            "width": width,
                            "batch": batch,
                            "dtype": str(dtype).removeprefix("torch."),
                            "path": label,
                            "median_us": us,
                            "matches_reference": same,
                        }
                    )
                    print(
                        f"{name:>14} B={batch:>3} {dtype!s:>15} {label:>18}: {us:9.1f} µs"
                        f"{'' if same else '  MISMATCH'}",
                        flush=True,
                    )
    doc = {
        "benchmark": "gpu_mask_apply",
        "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "xgrammar": getattr(xgrammar, "__version__", "installed") if xgrammar else None,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "note": "median µs per call, minus the cost of restoring the logits (timed alone)",
        "results": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1), encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
