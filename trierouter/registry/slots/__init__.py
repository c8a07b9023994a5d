"""Argument slots of tool calls: one exact engine per slot, chosen by :mod:`.dispatch`.

- :mod:`.nfa`: regular expressions over bytes, determinized into fragments;
- :mod:`.fragment`: deterministic byte automata and the builder that wires them per tool;
- :mod:`.formats`: fixed formats (dates, UUIDs, IPv4, integer ranges, numbers, bounded strings);
- :mod:`.regex`: the ``pattern`` subset served exactly;
- :mod:`.objects`: the keys of an object, one automaton for every window of skippable keys;
- :mod:`.dispatch`: JSON Schema → engine per slot (trie, format, automaton, xgrammar);
- :mod:`.schema_fragments`: the shared pieces it wires and its verdicts on sub-schemas;
- :mod:`.slot_records`: the slots it finds, the refusal, and the analyses a registry keeps;
- :mod:`.masks`: the per-state token masks of a tool's automaton over a vocabulary.
"""

from trierouter.registry.slots.dispatch import SlotCompiler
from trierouter.registry.slots.masks import ToolAutomaton, VocabTables
from trierouter.registry.slots.slot_records import Slot

__all__ = ["Slot", "SlotCompiler", "ToolAutomaton", "VocabTables"]
