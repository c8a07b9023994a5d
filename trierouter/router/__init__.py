"""Serving side: matchers, packed bitmasks and (later) engine adapters."""

from trierouter.router.bitmask import (
    allocate_token_bitmask,
    apply_token_bitmask_inplace,
    bitmask_to_ids,
    ids_to_bitmask,
)
from trierouter.router.matcher import Matcher

__all__ = [
    "Matcher",
    "allocate_token_bitmask",
    "apply_token_bitmask_inplace",
    "bitmask_to_ids",
    "ids_to_bitmask",
]
