"""Fine-tuning the embedder on (query, value text) pairs; the run is recorded beside the weights."""

from __future__ import annotations

import json
import os
import random
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from trierouter.shortlist.embedder import Embedder, optional_module

__all__ = ["fine_tune_embedder", "fine_tune_info"]


_TUNE_META = "trierouter_fine_tune.json"


def _pair_batches(
    pairs: Sequence[tuple[str, str]], batch_size: int, rng: random.Random
) -> list[list[tuple[str, str]]]:
    """Shuffled batches in which no text occurs twice (a repeated text would be a false
    in-batch negative); a pair that clashes waits for the next batch."""
    order = [i for i, (a, b) in enumerate(pairs) if a != b]
    rng.shuffle(order)
    batches: list[list[tuple[str, str]]] = []
    pending = order
    while pending:
        batch: list[tuple[str, str]] = []
        seen: set[str] = set()
        rest: list[int] = []
        for i in pending:
            a, b = pairs[i]
            if a in seen or b in seen:
                rest.append(i)
                continue
            batch.append((a, b))
            seen.update((a, b))
            if len(batch) == batch_size:
                batches.append(batch)
                batch, seen = [], set()
        if batch:
            batches.append(batch)
        pending = rest
    return batches


def fine_tune_embedder(
    pairs: Sequence[tuple[str, str]],
    output_dir: str | os.PathLike[str],
    *,
    base: Embedder | None = None,
    epochs: int = 1,
    batch_size: int = 64,
    lr: float = 3e-5,
    warmup: float = 0.1,
    scale: float = 20.0,
    symmetric: bool = True,
    seed: int = 0,
    threads: int | None = None,
    progress: bool = True,
    cache_dir: str | os.PathLike[str] | None = None,
) -> Embedder:
    """Fine-tune ``base`` (default: the shipped MiniLM) on ``(anchor, positive)`` pairs.

    The loss is multiple-negatives ranking (InfoNCE): each anchor must pick its positive among
    the batch's positives by scaled cosine similarity (``scale``); with ``symmetric`` also each
    positive its anchor. Batches never repeat a text. AdamW with linear warm-up (``warmup``, a
    fraction of the steps) and linear decay; ``threads`` sets torch's CPU threads meanwhile.
    Runs offline on the base model's device; shows a progress bar with the running loss.

    The model is saved to ``output_dir`` (a sentence-transformers folder, plus
    ``trierouter_fine_tune.json`` describing the run) and returned as an :class:`Embedder`
    with a new fingerprint, caching under ``cache_dir`` (default: the base's cache folder).
    """
    if isinstance(pairs, str):
        raise TypeError("pairs must be a sequence of (anchor, positive) tuples, got a str")
    for i, p in enumerate(pairs):
        if len(p) != 2 or not isinstance(p[0], str) or not isinstance(p[1], str):
            raise TypeError(f"pairs[{i}] = {p!r:.80} is not an (anchor, positive) pair of str")
    if epochs < 1 or batch_size < 2:
        raise ValueError(f"epochs={epochs} must be >= 1 and batch_size={batch_size} >= 2")
    base = base or Embedder()
    torch = optional_module("torch", "torch")
    tqdm = optional_module("tqdm.auto", "tqdm").tqdm
    out = Path(output_dir)
    rng = random.Random(seed)
    plans = [_pair_batches(pairs, batch_size, rng) for _ in range(epochs)]
    n_steps = sum(len(p) for p in plans)
    if not n_steps:
        raise ValueError("pairs is empty: nothing to fine-tune on")

    before = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        torch.manual_seed(seed)
        model = base.model
        device = model.device
        model.train()
        opt = torch.optim.AdamW(model.parameters(), lr=lr)
        n_warm = max(1, int(warmup * n_steps))

        def schedule(step: int) -> float:
            if step < n_warm:
                return (step + 1) / n_warm
            return max(0.0, (n_steps - step) / max(1, n_steps - n_warm))

        sched = torch.optim.lr_scheduler.LambdaLR(opt, schedule)
        ce = torch.nn.CrossEntropyLoss()

        def embed(texts: list[str]) -> Any:
            feats = model.preprocess(texts)
            feats = {k: v.to(device) if hasattr(v, "to") else v for k, v in feats.items()}
            e = model(feats)["sentence_embedding"]
            return torch.nn.functional.normalize(e, dim=-1)

        t0 = time.perf_counter()
        bar = tqdm(total=n_steps, desc="fine-tune", unit="step", disable=not progress)
        losses: list[float] = []
        try:
            for epoch, batches in enumerate(plans):
                for batch in batches:
                    a = embed([p[0] for p in batch])
                    b = embed([p[1] for p in batch])
                    sim = scale * (a @ b.T)
                    labels = torch.arange(len(batch), device=device)
                    loss = ce(sim, labels)
                    if symmetric:
                        loss = (loss + ce(sim.T, labels)) / 2
                    loss.backward()
                    opt.step()
                    sched.step()
                    opt.zero_grad(set_to_none=True)
                    losses.append(float(loss.detach()))
                    recent = losses[-20:]
                    bar.set_postfix(epoch=epoch + 1, loss=f"{sum(recent) / len(recent):.3f}")
                    bar.update(1)
        finally:
            bar.close()
            model.eval()
        seconds = time.perf_counter() - t0
        out.mkdir(parents=True, exist_ok=True)
        model.save(str(out), create_model_card=False)
    finally:
        torch.set_num_threads(before)
        # the base's in-memory model was trained in place: drop it, the base reloads its weights
        base._model = None
        base._cache = None
    meta = {
        "base_model": base.name,
        "base_fingerprint": base.fingerprint,
        "pairs": len(pairs),
        "epochs": epochs,
        "batch_size": batch_size,
        "steps": n_steps,
        "lr": lr,
        "warmup": warmup,
        "scale": scale,
        "symmetric": symmetric,
        "seed": seed,
        "threads": threads,
        "seconds": round(seconds, 2),
        "loss_first": round(sum(losses[:20]) / len(losses[:20]), 4),
        "loss_last": round(sum(losses[-20:]) / len(losses[-20:]), 4),
    }
    (out / _TUNE_META).write_text(json.dumps(meta, indent=2) + "\n")
    tuned = Embedder(
        out,
        device=base.device,
        batch_size=base.batch_size,
        cache_dir=cache_dir if cache_dir is not None else base.cache_dir,
    )
    tuned._model = model
    return tuned


def fine_tune_info(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The run description :func:`fine_tune_embedder` saved with a model (None if absent)."""
    f = Path(path) / _TUNE_META
    if not f.is_file():
        return None
    info: dict[str, Any] = json.loads(f.read_text())
    return info
