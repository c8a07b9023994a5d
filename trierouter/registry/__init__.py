"""Compile side: vocabularies, the per-tokenizer index, compiled sets (numpy and bytes only)."""

from trierouter.registry.index import TokenIndex, default_cache_dir
from trierouter.registry.trie import ChoiceSet, compile_choices
from trierouter.registry.vocabulary import Vocabulary

__all__ = ["ChoiceSet", "TokenIndex", "Vocabulary", "compile_choices", "default_cache_dir"]
