"""The arms of benchmarks/classify.py beyond the first model's one forward call per text.

``free_mapped``: the model writes its answer freely (greedy, no constraint, at most
``max_new_tokens``, the first line kept: :meth:`Classifier.generate_free`) after the same prompt
as the constrained arms (the K candidates listed as ``code: description``, then ``Label: ``);
the answer is mapped to a label by :func:`map_free`: a code of the label set written at its
start is taken as is, otherwise the answer goes to the same retriever as a query and its top-1
over the whole set is the label. The rule is fixed here, before any outcome is read.

``second model``: another model through the same classifier, retriever, K, prompt and
calibration rule (``trierouter.classify_combine.calibrate`` on the calibration terms).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Container, Sequence
from typing import Any

_STOP = frozenset(" \t\n:;,)]")


def map_free(
    answer: str, labels: Container[str], nearest: Callable[[str], str | None]
) -> tuple[str | None, str]:
    """The label of a free answer, and how it was found: ``"code"`` when the answer starts
    with a label followed by its end, a space, one of ``:;,)]`` or a full stop that ends the
    answer or precedes a space (``"R94.8: Abnormal ..."``; the longest such label),
    ``"retriever"`` when ``nearest(answer)`` (the retriever's top-1) chose it, ``"empty"``
    (``None``) for a blank answer."""
    text = answer.strip().strip("`*\"'")
    if not text:
        return None, "empty"
    for end in range(len(text), 0, -1):
        after = text[end : end + 2]
        ends = not after or after[0] in _STOP or (after[0] == "." and not after[1:].strip())
        if ends and text[:end] in labels:
            return text[:end], "code"
    return nearest(text), "retriever"


def free_row(clf: Any, sl: Any, labels: Container[str], text: str, gold: frozenset[str],
             max_new_tokens: int) -> dict[str, Any]:  # fmt: skip
    """One text: the free answer, its label and how it was mapped, seconds (both steps)."""

    def nearest(q: str) -> str | None:
        ids = sl.search_ids([q], 1)[0]
        return str(sl.values[int(ids[0])]) if len(ids) else None

    t0 = time.perf_counter()
    [answer] = clf.generate_free([text], max_new_tokens=max_new_tokens)
    label, how = map_free(answer, labels, nearest)
    return {
        "text": text,
        "gold": sorted(gold),
        "answer": answer,
        "label": label,
        "how": how,
        "seconds": round(time.perf_counter() - t0, 3),
    }


def free_summary(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Accuracy of the mapped free answers, how they were mapped, speed."""
    n = len(rows)
    how = [r["how"] for r in rows]
    return {
        "n": n,
        "free_mapped": round(sum(r["label"] in set(r["gold"]) for r in rows) / n, 4),
        "mapped_by_code": round(how.count("code") / n, 4),
        "mapped_by_retriever": round(how.count("retriever") / n, 4),
        "empty": round(how.count("empty") / n, 4),
        "code_hits": sum(r["how"] == "code" and r["label"] in set(r["gold"]) for r in rows),
        "seconds_per_text": round(statistics.mean(r["seconds"] for r in rows), 3),
        "seconds_per_text_median": round(statistics.median(r["seconds"] for r in rows), 3),
    }


def load_pair(name: str, dtype: str) -> tuple[Any, Any]:
    """A ``trierouter.models`` model as a transformers ``(model, tokenizer)`` pair."""
    import torch
    import transformers

    from trierouter.models import load_model

    folder = str(load_model(name, progress=False))
    model = transformers.AutoModelForCausalLM.from_pretrained(
        folder, dtype=getattr(torch, dtype)
    ).eval()
    return model, transformers.AutoTokenizer.from_pretrained(folder)


def run_meta(commit: str, date: str, done: int, total: int) -> dict[str, Any]:
    """When (its start) and on what an arm ran; ``partial`` when it has fewer texts than planned."""
    return {"commit": commit, "date": date, "texts": done, "planned": total,
            "partial": done < total}  # fmt: skip


def machine_meta(root: Any, settings: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    """The ``machine`` block of a transformers timing: the run's record
    (``benchmarks/_provenance.py``: commit of ``root``, uncommitted changes, date, load, the
    script's ``settings``), versions, torch's thread count, CPUs and the host's sharing
    (``extra`` appended, e.g. load)."""
    import os
    import platform

    import torch
    import transformers
    from _provenance import arm_run

    run = arm_run(settings, root=root)
    return {
        "commit": run["commit"],
        "dirty": run["dirty"],
        "date": run["date"],
        "settings": run["settings"],
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "torch_threads": torch.get_num_threads(),
        "cpus": os.cpu_count(),
        "shared_host": f"2 cores shared with other agents' jobs; nice -n {os.nice(0)}",
        **extra,
    }
