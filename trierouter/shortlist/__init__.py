"""Beyond 50,000 values: shortlists per request, and √K grouping.

- :class:`Shortlist` (``Shortlist.build(values, descriptions=..., synonyms=...)``): the one
  obvious way: BM25 and the embedding model over descriptions and synonyms, fused with weights
  chosen by cross-validation on the set's own synonyms; saved and loaded as one folder.

- :class:`EmbeddingIndex` (sentence-transformers + faiss), :class:`BM25Index` (words and
  character n-grams, numpy) and :class:`HybridIndex` (reciprocal-rank fusion) return the top-k
  values for a query; the router compiles a ChoiceSet over exactly those per request.
- :func:`build_hierarchy` rewrites K values into ≈⌈√K⌉ balanced labelled groups, compiled as one
  ChoiceSet over ``label + sep + value`` (group first, then member) and mapped back.
- :func:`route_set` picks between the full trie, a shortlist and the hierarchy.
- :class:`ToolIndex` searches tools by :func:`tool_text` (name, name in words, description,
  parameters): the tool search of ``trierouter serve``.
- :class:`ToolGroups` partitions a tool registry into ≈√K labelled groups by namespace (an API,
  a dotted prefix) or learned clusters; ``trierouter.router.grouped_tools.GroupedRouter`` has
  the model pick a group, then a tool inside it.

This package returns values and never decodes. sentence-transformers and faiss are imported
only when used (``pip install 'trierouter[shortlist]'``).
"""

from trierouter.errors import NoCandidatesError
from trierouter.shortlist._common import IndexMismatchError, Retriever
from trierouter.shortlist.bm25 import BM25Index
from trierouter.shortlist.builder import DEFAULT_FUSION, Fusion, Shortlist
from trierouter.shortlist.cache import EmbeddingCache
from trierouter.shortlist.embedder import Embedder
from trierouter.shortlist.faiss_index import EmbeddingIndex
from trierouter.shortlist.finetune import fine_tune_embedder
from trierouter.shortlist.hierarchy import (
    Group,
    Hierarchy,
    build_hierarchy,
    kmeans_paths,
    namespace_path,
)
from trierouter.shortlist.hybrid import HybridIndex
from trierouter.shortlist.policy import DEFAULT_THRESHOLD, RoutedSet, route_set
from trierouter.shortlist.tool_groups import ToolGroup, ToolGroups, tool_namespace
from trierouter.shortlist.tool_text import ToolIndex, tool_text

__all__ = [
    "DEFAULT_FUSION",
    "DEFAULT_THRESHOLD",
    "BM25Index",
    "Embedder",
    "EmbeddingCache",
    "EmbeddingIndex",
    "Fusion",
    "Group",
    "Hierarchy",
    "HybridIndex",
    "IndexMismatchError",
    "NoCandidatesError",
    "Retriever",
    "RoutedSet",
    "Shortlist",
    "ToolGroup",
    "ToolGroups",
    "ToolIndex",
    "build_hierarchy",
    "fine_tune_embedder",
    "kmeans_paths",
    "namespace_path",
    "route_set",
    "tool_namespace",
    "tool_text",
]
