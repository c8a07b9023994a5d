"""A sentence-transformers model run by onnxruntime: exported locally, optionally int8.

The model's own weights are exported once (``torch.onnx``, eager attention so padding masks are
honoured) into ``<cache>/onnx/<fingerprint>/`` with its mean pooling and L2 normalisation inside
the graph, and for ``onnx-int8`` quantized there (onnxruntime's dynamic quantization, int8
weights per output channel). Nothing is downloaded: the export reads the local model folder.
Queries are tokenized with the model's own ``tokenizer.json`` (the ``tokenizers`` library), no
padding for one text, and batches of texts sorted by token count otherwise.

On the shipped all-MiniLM-L6-v2, ``onnx`` (float32) matches the torch model to cosine 1.0000
and ``onnx-int8`` to about 0.99 (``benchmarks/shortlist.py`` measures both). int8 activations
are quantized per batch (one scale per tensor), so a text's int8 vector also depends slightly on
the batch it is embedded in; the embedding cache keeps the first one computed.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
import warnings
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from trierouter.errors import missing

__all__ = ["Backend", "OnnxEncoder", "onnx_model_path"]

F32 = npt.NDArray[np.float32]
Backend = Literal["torch", "onnx", "onnx-int8"]
logger = logging.getLogger(__name__)

_EXPORT_VERSION = 2  # bump when the exported graph changes: new files, never stale ones
# v2: BERT-family graphs fused by onnxruntime's transformer optimizer (attention, layer norms,
# GELU: one kernel each) before int8 quantization; a one-text query costs a third less CPU


def _need(module: str, package: str) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise missing(package, "shortlist") from exc


def _model_config(path: Path) -> tuple[int, str]:
    """(max_seq_length, pooling) of a sentence-transformers folder; refuses what the graph
    does not implement (only mean pooling followed by normalisation is exported)."""
    max_len = 256
    cfg = path / "sentence_bert_config.json"
    if cfg.is_file():
        max_len = int(json.loads(cfg.read_text(encoding="utf-8")).get("max_seq_length", 256))
    modules = path / "modules.json"
    kinds = []
    if modules.is_file():
        kinds = [str(m.get("type", "")) for m in json.loads(modules.read_text(encoding="utf-8"))]
    pooling = "mean"
    for p in sorted(path.glob("*_Pooling/config.json")):
        conf = json.loads(p.read_text(encoding="utf-8"))
        if "pooling_mode" in conf:  # sentence-transformers >= 5: one key
            mode = conf["pooling_mode"]
            pooling = mode if isinstance(mode, str) else ",".join(map(str, mode))
        else:  # older: one boolean per mode (none set means mean)
            modes = [k for k, v in conf.items() if k.startswith("pooling_mode_") and v]
            pooling = ",".join(m.removeprefix("pooling_mode_") for m in modes) or "mean"
    if pooling not in ("mean_tokens", "mean"):
        raise ValueError(
            f"{path}: pooling {pooling!r} is not exported to ONNX (mean pooling only); "
            "use backend='torch'"
        )
    if kinds and not any(k.endswith("Normalize") for k in kinds):
        raise ValueError(
            f"{path}: the model does not normalise its embeddings; the ONNX graph always does. "
            "Use backend='torch'"
        )
    return max_len, "mean"


def onnx_model_path(model_path: Path, fingerprint: str, int8: bool, cache_dir: Path) -> Path:
    """The exported (and with ``int8``, quantized) graph of a model, built on first use."""
    folder = cache_dir / "onnx" / f"{fingerprint[:16]}-v{_EXPORT_VERSION}"
    f32 = folder / "model.onnx"
    target = folder / ("model.int8.onnx" if int8 else "model.onnx")
    if target.is_file():
        return target
    with _file_lock(folder.parent / f".{folder.name}.lock"):
        if target.is_file():
            return target
        folder.mkdir(parents=True, exist_ok=True)
        if not f32.is_file():
            t = time.perf_counter()
            raw = folder / "model.unfused.onnx"
            _export(model_path, raw)
            _fuse(model_path, raw, f32)
            raw.unlink()
            logger.info(
                "exported %s to ONNX in %.1f s: %s", model_path, time.perf_counter() - t, f32
            )
        if int8:
            t = time.perf_counter()
            _quantize(f32, target)
            logger.info("quantized %s to int8 in %.1f s", f32, time.perf_counter() - t)
    return target


@contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    """One process exports while the others wait (``fcntl.flock``; a no-op without fcntl)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        yield
        return
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _export(model_path: Path, out: Path) -> None:
    torch = _need("torch", "torch")
    transformers = _need("transformers", "transformers")

    class Pipeline(torch.nn.Module):  # type: ignore[misc, name-defined]
        def __init__(self, encoder: Any) -> None:
            super().__init__()
            self.encoder = encoder

        def forward(self, input_ids: Any, attention_mask: Any) -> Any:
            hidden = self.encoder(
                input_ids=input_ids,
                attention_mask=attention_mask,
                token_type_ids=torch.zeros_like(input_ids),
            ).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, p=2.0, dim=1)

    encoder = transformers.AutoModel.from_pretrained(
        str(model_path), local_files_only=True, attn_implementation="eager"
    ).eval()
    ids = torch.randint(1000, 2000, (3, 11))
    mask = torch.ones(3, 11, dtype=torch.long)
    mask[1, 6:] = 0  # a padded row, so the traced graph keeps the mask path
    tmp = out.with_suffix(f".tmp{os.getpid()}")
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            Pipeline(encoder).eval(),
            (ids, mask),
            str(tmp),
            input_names=["input_ids", "attention_mask"],
            output_names=["embedding"],
            dynamic_axes={
                "input_ids": {0: "batch", 1: "length"},
                "attention_mask": {0: "batch", 1: "length"},
                "embedding": {0: "batch"},
            },
            opset_version=17,
            dynamo=False,
        )
    os.replace(tmp, out)


def _fuse(model_path: Path, src: Path, out: Path) -> None:
    """``src`` with onnxruntime's BERT fusions (Attention, SkipLayerNormalization, BiasGelu,
    EmbedLayerNormalization) when the model is a BERT (``config.json``), else as it is."""
    cfg_file = model_path / "config.json"
    cfg = json.loads(cfg_file.read_text(encoding="utf-8")) if cfg_file.is_file() else {}
    tmp = out.with_suffix(f".tmp{os.getpid()}")
    if cfg.get("model_type") != "bert":
        shutil.copyfile(src, tmp)
    else:
        optimizer = _need("onnxruntime.transformers.optimizer", "onnxruntime")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fused = optimizer.optimize_model(
                str(src),
                model_type="bert",
                num_heads=int(cfg["num_attention_heads"]),
                hidden_size=int(cfg["hidden_size"]),
                opt_level=1,
            )
        fused.save_model_to_file(str(tmp))
    os.replace(tmp, out)


def _quantize(src: Path, out: Path) -> None:
    quant = _need("onnxruntime.quantization", "onnxruntime")
    tmp = out.with_suffix(f".tmp{os.getpid()}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        logging.getLogger().disabled, was = True, logging.getLogger().disabled
        try:  # onnxruntime logs a pre-processing hint through the root logger
            onnx = _need("onnx", "onnx")
            quant.quantize_dynamic(
                str(src),
                str(tmp),
                weight_type=quant.QuantType.QInt8,
                per_channel=True,
                # the fused ops (com.microsoft domain) have no shape inference for their outputs
                extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
            )
        finally:
            logging.getLogger().disabled = was
    os.replace(tmp, out)


class OnnxEncoder:
    """Unit vectors from an exported sentence-transformers graph (see the module docstring).

    ``threads``: how many batches run at once, each on one thread (a single text always runs
    on one: at that size threads cost more than they save). Thread spinning is off, so idle
    pool threads do not take a shared core from other work.
    """

    def __init__(
        self,
        model_path: Path,
        fingerprint: str,
        *,
        int8: bool,
        cache_dir: Path,
        batch_size: int = 32,
        threads: int | None = None,
    ) -> None:
        self.max_length, _ = _model_config(model_path)
        self.path = onnx_model_path(model_path, fingerprint, int8, cache_dir)
        tokenizers = _need("tokenizers", "tokenizers")
        tok_file = model_path / "tokenizer.json"
        if not tok_file.is_file():
            raise FileNotFoundError(
                f"{model_path}: no tokenizer.json (a fast tokenizer is needed for the ONNX "
                "backends); use backend='torch'"
            )
        self._tok = tokenizers.Tokenizer.from_file(str(tok_file))
        self._tok.no_padding()
        self._tok.enable_truncation(self.max_length)
        self.batch_size = batch_size
        self.threads = threads if threads is not None else min(2, os.cpu_count() or 1)
        self._session = self._open()
        out = self._session.get_outputs()[0]
        self.dim = int(out.shape[-1])

    def _open(self) -> Any:
        """One session on one thread; batches on several threads share it."""
        ort = _need("onnxruntime", "onnxruntime")
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1
        opts.inter_op_num_threads = 1
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        opts.log_severity_level = 3
        return ort.InferenceSession(str(self.path), opts, providers=["CPUExecutionProvider"])

    def _run(self, encodings: Sequence[Any]) -> F32:
        width = max(len(e.ids) for e in encodings)
        ids = np.zeros((len(encodings), width), np.int64)
        mask = np.zeros((len(encodings), width), np.int64)
        for i, e in enumerate(encodings):
            ids[i, : len(e.ids)] = e.ids
            mask[i, : len(e.ids)] = 1
        out = self._session.run(None, {"input_ids": ids, "attention_mask": mask})[0]
        return np.asarray(out, np.float32)

    def encode(self, texts: Sequence[str], *, progress: bool = False) -> F32:
        """Unit vectors for ``texts`` in order. All texts are tokenized first and batched in
        order of token count (a batch pads almost nothing: +0.05% tokens on ICD-10-CM's
        descriptions, +27% when sorted by characters); ``threads`` batches run at once, each on
        one thread (onnxruntime runs one session from several threads)."""
        if len(texts) == 1:
            return self._run([self._tok.encode(texts[0])])
        encodings = self._tok.encode_batch(list(texts))
        lengths = np.fromiter((len(e.ids) for e in encodings), np.int64, len(encodings))
        order = np.argsort(lengths, kind="stable")
        batches = [order[s : s + self.batch_size] for s in range(0, len(texts), self.batch_size)]
        out = np.zeros((len(texts), self.dim), np.float32)

        def run(idx: npt.NDArray[np.int64]) -> None:
            out[idx] = self._run([encodings[i] for i in idx])

        bar: Any = None
        if progress:
            bar = _need("tqdm.auto", "tqdm").tqdm(total=len(texts), desc="embed", unit="text")
        workers = max(1, min(self.threads, len(batches)))
        with ThreadPoolExecutor(workers) as pool:
            for idx, _ in zip(batches, pool.map(run, batches), strict=True):
                if bar is not None:
                    bar.update(len(idx))
        if bar is not None:
            bar.close()
        return out
