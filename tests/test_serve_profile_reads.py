"""serve_profile's reading of py-spy's raw samples, against counts made by hand."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import load_script

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"


def test_trierouter_samples_are_counted_by_innermost_function_launcher_aside(
    tmp_path: Path,
) -> None:
    sp = load_script(BENCH / "serve_profile.py")
    raw = tmp_path / "raw.txt"
    launcher = "main (trierouter/router/vllm/launch.py:114)"
    raw.write_text(
        "\n".join(
            [
                # the API server: vLLM under the launcher (not ours), then our middleware
                f"_run_code (<frozen runpy>:88);{launcher};serve (vllm/x.py:1) 7",
                f"_run_code (<frozen runpy>:88);{launcher};serve (vllm/x.py:1);"
                "Middleware.__call__ (trierouter/router/vllm/server.py:9) 3",
                # a worker: the processor inside vLLM's step, innermost ours twice over
                "spawn_main (multiprocessing/spawn.py:1);step (vllm/w.py:2);"
                "Proc.apply (trierouter/router/vllm/processor.py:4);"
                "_apply_torch (trierouter/router/bitmask.py:85) 5",
                "spawn_main (multiprocessing/spawn.py:1);step (vllm/w.py:2);"
                "Proc.apply (trierouter/router/vllm/processor.py:4);mm (torch/x.py:3) 2",
                "junk line without a count",
                "spawn_main (multiprocessing/spawn.py:1);forward (vllm/m.py:5) 83",
            ]
        )
    )
    out = sp.summarize_raw(raw)
    assert out["samples"] == 100
    assert out["trierouter_samples"] == 10
    assert out["trierouter_share"] == 0.1
    assert out["trierouter_by_function"] == {
        "_apply_torch": 5,
        "Middleware.__call__": 3,
        "Proc.apply": 2,
    }
    assert out["top_innermost"]["forward"] == 83 and out["top_innermost"]["serve"] == 7
