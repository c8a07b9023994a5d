"""Fuzz a live ``trierouter serve`` with request bodies for minutes: no 5xx, no engine death.

    python benchmarks/serve_fuzz.py --seconds 600    # writes benchmarks/results/serve_fuzz.json

The server: ``trierouter serve`` on the tests' tiny random-weight Qwen2-tokenizer model with
Qwen2.5's tool template, ``--api-key``, a named 2,000-tool registry ``api`` and at most 64 inline
tools (``tests/test_serve.py``'s configuration). Bodies: :mod:`trierouter.testing.request_fuzz`
(hypothesis; messages, tools with every schema keyword, contradictions and dangling ``$ref``,
every ``tool_choice`` form, sampling fields past their limits, ``trierouter_*`` extra args, one
field replaced by arbitrary JSON half of the time), 25 per hypothesis run with a new seed each
run, sent one at a time. After each run a good ``required`` request must come back with a valid
call (the engine is alive). Recorded: statuses, every server fault (5xx, dropped connection,
5xx error event in a stream) with its body, the good requests' outcomes, and the tracebacks in
the server log.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
OUT = ROOT / "benchmarks" / "results" / "serve_fuzz.json"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=600.0, help="time spent sending bodies")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)

    from hypothesis import HealthCheck, given, seed, settings

    from tests.test_serve import KEY, server_config
    from trierouter.testing.request_fuzz import bodies, good_request_ok, send, server_fault
    from trierouter.testing.serve import serve

    root = Path(tempfile.mkdtemp(prefix="serve-fuzz-"))
    model, env, server_args = server_config(root)
    statuses: collections.Counter[int] = collections.Counter()
    faults: list[dict[str, Any]] = []
    good: list[str | None] = []
    sent = 0
    with serve(model, log=root / "server.log", env=env, args=server_args) as url:
        t0 = time.perf_counter()
        run = 0
        while time.perf_counter() - t0 < args.seconds:

            @seed(run)
            @settings(max_examples=25, deadline=None, database=None,
                      suppress_health_check=list(HealthCheck))  # fmt: skip
            @given(bodies())
            def one(body: Any) -> None:
                nonlocal sent
                status, text = send(url, body, KEY)
                sent += 1
                statuses[status] += 1
                fault = server_fault(status, text)
                if fault is not None:
                    faults.append({"fault": fault, "body": json.dumps(body)[:2000]})

            one()
            good.append(good_request_ok(url, KEY))
            run += 1
            print(f"{time.perf_counter() - t0:6.0f} s: {sent} bodies, statuses "
                  f"{dict(sorted(statuses.items()))}, faults {len(faults)}, good "
                  f"{good.count(None)}/{len(good)}", flush=True)  # fmt: skip
        wall = time.perf_counter() - t0
    log = (root / "server.log").read_text(errors="replace").split("[shutdown]")[0]
    result = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "seconds": round(wall, 1),
        "bodies": sent,
        "hypothesis_runs": run,
        "statuses": {str(k): v for k, v in sorted(statuses.items())},
        "server_faults": len(faults),
        "faults": faults[:20],
        "good_requests": len(good),
        "good_requests_ok": good.count(None),
        "good_request_failures": [g for g in good if g][:10],
        "log_tracebacks": log.count("Traceback"),
        "engine_dead_in_log": "EngineDeadError" in log,
        "host": "2 cores, shared with other jobs",
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "faults"}, indent=1))
    return 1 if faults or result["good_requests_ok"] < len(good) else 0


if __name__ == "__main__":
    raise SystemExit(main())
