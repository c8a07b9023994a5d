"""trierouter: make an LLM choose one value out of a huge finite set.

A set of strings compiles into a byte-level trie whose per-node token masks are precomputed
against the tokenizer's vocabulary, so every decoding step is a lookup; the masks are identical
to an FSM engine's (XGrammar's) for the same set.

    vocab = Vocabulary.from_tokenizer(tokenizer)      # or shipped_vocabulary("qwen2")
    index = TokenIndex.get(vocab)                     # once per tokenizer, cached on disk
    choices = compile_choices(values, index)          # once per set
    matcher = Matcher(choices)                        # per request
    Classifier(labels, model="path/to/model").classify(texts)   # labels with exact scores
"""

from trierouter.classify import Classifier
from trierouter.errors import (
    CompileError,
    CorruptFileError,
    EmptySetError,
    InvalidValueError,
    MissingDependencyError,
    TrieRouterError,
    UnreachableValueError,
    VocabularyError,
    VocabularyMismatchError,
)
from trierouter.registry.index import TokenIndex
from trierouter.registry.shipped import SHIPPED, shipped_vocabulary
from trierouter.registry.trie import ChoiceSet, compile_choices
from trierouter.registry.vocabulary import Vocabulary
from trierouter.router.bitmask import allocate_token_bitmask, apply_token_bitmask_inplace
from trierouter.router.matcher import Matcher

__version__ = "0.1.0"

__all__ = [
    "SHIPPED",
    "ChoiceSet",
    "Classifier",
    "CompileError",
    "CorruptFileError",
    "EmptySetError",
    "InvalidValueError",
    "Matcher",
    "MissingDependencyError",
    "TokenIndex",
    "TrieRouterError",
    "UnreachableValueError",
    "Vocabulary",
    "VocabularyError",
    "VocabularyMismatchError",
    "__version__",
    "allocate_token_bitmask",
    "apply_token_bitmask_inplace",
    "compile_choices",
    "shipped_vocabulary",
]
