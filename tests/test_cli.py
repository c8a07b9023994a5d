"""Every subcommand through the real console script, success and error paths.

The command is the ``trierouter`` console script next to the interpreter (what ``pip install``
puts on PATH), else ``python -m trierouter``; the checkout goes first on ``PYTHONPATH`` so the
code under test is this tree's even where an older install sits in the environment.
Errors must be one line on stderr with exit status 2, never a traceback.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from trierouter.data.icd10cm import write_icd10cm_eval_set

ROOT = Path(__file__).resolve().parent.parent


def _command() -> list[str]:
    script = Path(sys.executable).with_name("trierouter")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "trierouter"]


def run(
    *args: str, stdin: str | None = None, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    env.setdefault("HF_HUB_OFFLINE", "1")
    env["OMP_NUM_THREADS"] = "1"  # the tiny model on a shared small machine
    return subprocess.run(
        [*_command(), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=ROOT,
    )


def assert_one_line_error(done: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    lines = [ln for ln in done.stderr.splitlines() if "error:" in ln]
    assert len(lines) == 1, done.stderr
    for n in needles:
        assert n in lines[0], lines[0]


def test_version_is_the_projects() -> None:
    import tomllib

    done = run("--version")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"trierouter {project['version']}"


def test_console_script_is_this_tree() -> None:
    done = run("--help")
    assert done.returncode == 0 and "compile" in done.stdout and "classify" in done.stdout
    probe = subprocess.run(
        [sys.executable, "-c", "import trierouter; print(trierouter.__file__)"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=True,
    )
    assert Path(probe.stdout.strip()).parent.parent == ROOT


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("transformers")
    from trierouter.testing.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("cli-model") / "qwen2")


def test_compile_and_inspect(tmp_path: Path) -> None:
    values = tmp_path / "values.txt"
    values.write_text("get_user\nlist_orders\ncafé\n", encoding="utf-8")
    out = tmp_path / "set.trt"
    done = run("compile", str(values), "-o", str(out), "--tokenizer", "gpt2")
    assert done.returncode == 0, done.stderr
    assert "trie nodes" in done.stdout and "memory" in done.stdout and "compile" in done.stdout
    assert out.is_file()
    spec = tmp_path / "tools.json"  # a registry of tool specs: their names are the values
    spec.write_text(json.dumps([{"name": "a_tool"}, {"function": {"name": "b_tool"}}]))
    done = run("compile", str(spec), "--tokenizer", "gpt2")
    assert done.returncode == 0 and (tmp_path / "tools.trt").is_file()
    info = run("inspect", str(out), "--tokenizer", "gpt2", "--prefix", "get_")
    assert info.returncode == 0, info.stderr
    assert "'café'" in info.stdout and "after 'get_'" in info.stdout and "user" in info.stdout
    assert run("info", str(out), "--tokenizer", "gpt2").returncode == 0
    # error paths
    assert_one_line_error(
        run("inspect", str(out), "--tokenizer", "mistral-v3"), "compiled for 'gpt2'"
    )
    # no tokenizer given: the one the set was compiled for, not qwen2
    info = run("inspect", str(out))
    assert info.returncode == 0, info.stderr
    assert "'café'" in info.stdout
    assert_one_line_error(run("inspect", str(tmp_path / "none.trt")), "trierouter compile")
    assert_one_line_error(
        run("inspect", str(out), "--tokenizer", "gpt2", "--prefix", "zzz"), "not a prefix"
    )
    assert_one_line_error(run("compile", str(tmp_path / "missing.txt")), "missing.txt")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert_one_line_error(run("compile", str(bad)), "not valid JSON")
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    assert_one_line_error(run("compile", str(empty)), "empty")
    assert_one_line_error(run("compile"), "required", "--help")
    assert_one_line_error(run("compile", str(values), "--bogus"), "unrecognized")


def test_classify(model_dir: Path, tmp_path: Path) -> None:
    labels = tmp_path / "labels.txt"
    labels.write_text("billing\nshipping\nrefund request\n", encoding="utf-8")
    done = run(
        "classify", "--labels", str(labels), "--model", str(model_dir), "--top-n", "3", "--json",
        stdin="where is my parcel?\nI was charged twice\n",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(rows) == 2
    for r in rows:
        assert r["label"] in {"billing", "shipping", "refund request"}
        assert len(r["scores"]) == 3 and r["scores"][0]["label"] == r["label"]
    assert_one_line_error(
        run("classify", "--labels", str(labels), "--model", str(tmp_path), "--text", "x"),
        "config.json",
    )
    assert_one_line_error(
        run("classify", "--labels", str(labels), "--model", str(model_dir), stdin=""), "stdin"
    )
    assert_one_line_error(
        run(
            "classify",
            "--labels",
            str(tmp_path / "no.txt"),
            "--model",
            str(model_dir),
            "--text",
            "x",
        ),
        "no.txt",
    )


def test_eval(model_dir: Path, tmp_path: Path) -> None:
    data, labels = write_icd10cm_eval_set(tmp_path / "icd", n_labels=20, n_examples=4)
    out = tmp_path / "results.json"
    done = run(
        "eval", "--data", str(data), "--labels", str(labels), "--model", str(model_dir),
        "--think-tokens", "4", "--json", str(out),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    for mode in ("unconstrained", "constrained", "think"):
        assert mode in done.stdout
    results = {r["mode"]: r for r in json.loads(out.read_text())}
    assert results["constrained"]["validity"] == 1.0 and results["think"]["validity"] == 1.0
    assert_one_line_error(
        run("eval", "--data", str(tmp_path / "no.jsonl"), "--labels", str(labels)), "no.jsonl"
    )
    other = tmp_path / "other.txt"
    other.write_text("A00.0\n")
    assert_one_line_error(
        run("eval", "--data", str(data), "--labels", str(other), "--model", str(model_dir)),
        "not in",
    )
    assert_one_line_error(
        run("eval", "--data", str(data), "--labels", str(labels), "--modes", "beam"), "--modes"
    )
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"text": "x"}\n')
    assert_one_line_error(run("eval", "--data", str(broken), "--labels", str(labels)), "label")


def test_bench(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    done = run(
        "bench", "--ks", "10", "--engines", "trierouter", "--budget", "0.1", "--out", str(tmp_path)
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "compile_and_step.json").is_file()
    assert (tmp_path / "compile_and_step.png").is_file()
    assert_one_line_error(run("bench", "--benchmarks", str(tmp_path)), "--benchmarks")


def test_demo_help() -> None:
    done = run("demo", "--help-demo")
    assert done.returncode == 0 and "--quick" in done.stdout


def test_route(model_dir: Path, tmp_path: Path) -> None:
    from tests.test_tool_calls import SMALL

    reg = tmp_path / "tools.json"
    reg.write_text(json.dumps(SMALL), encoding="utf-8")
    done = run("route", "weather in Oslo tomorrow", "--registry", str(reg),
               "--model", str(model_dir), "--budget", "6")  # fmt: skip
    assert done.returncode == 0, done.stderr
    msg = json.loads(done.stdout)
    (call,) = msg["tool_calls"]
    assert call["type"] == "function" and call["function"]["name"] in {
        t["function"]["name"] for t in SMALL
    }
    json.loads(call["function"]["arguments"])  # a JSON string, as in OpenAI's format
    forced = run("route", "x", "--registry", str(reg), "--model", str(model_dir),
                 "--tool-choice", "ping")  # fmt: skip
    assert forced.returncode == 0, forced.stderr
    assert json.loads(forced.stdout)["tool_calls"][0]["function"]["name"] == "ping"


def test_route_errors(tmp_path: Path) -> None:
    assert_one_line_error(
        run("route", "x", "--registry", str(tmp_path / "missing.json")), "missing.json"
    )
    bad = tmp_path / "bad.json"
    bad.write_text("{not json", encoding="utf-8")
    assert_one_line_error(run("route", "x", "--registry", str(bad)), "not JSON")
    reg = tmp_path / "tools.json"
    reg.write_text(json.dumps([{"name": "a", "input_schema": {"type": "object"}}]))
    assert_one_line_error(
        run("route", "x", "--registry", str(reg), "--tool-choice", "b"), "--tool-choice"
    )
    dup = tmp_path / "dup.json"
    dup.write_text(json.dumps([{"name": "a", "input_schema": {"type": "object"}}] * 2))
    assert_one_line_error(run("route", "x", "--registry", str(dup)), "'a'")
