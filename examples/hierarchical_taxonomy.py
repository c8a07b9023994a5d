"""A hierarchical taxonomy: 5,000+ world subdivisions grouped by country, decoded group first.

``build_hierarchy`` rewrites each value as ``group / value`` over about √K balanced groups (here
the country, split or packed to balance), so the model spells a country, then a subdivision of
it; ``Hierarchy.value_of`` maps the decoded string back.

    python examples/hierarchical_taxonomy.py [--model DIR]
"""

from __future__ import annotations

import argparse
import sys

import pycountry
from _common import model_argument, model_dir

from trierouter.classify import Classifier
from trierouter.shortlist import build_hierarchy


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    model_argument(parser)
    args = parser.parse_args(argv)
    country = {c.alpha_2: c.name for c in pycountry.countries}
    subdivisions = sorted(pycountry.subdivisions, key=lambda s: s.code)
    values = [f"{s.name} ({s.code})" for s in subdivisions]
    paths = [(country.get(s.country_code, s.country_code),) for s in subdivisions]

    hierarchy = build_hierarchy(values, paths)
    print(hierarchy)
    print("e.g.", hierarchy.string_of(values[0]))

    clf = Classifier(values, model=model_dir(args.model), policy="hierarchy", path=paths)
    for p in clf.classify(["a region famous for wine in France", "the state of Texas"], top_n=2):
        assert p.label in values
        print(f"{p.text!r} -> {p.label} (group {hierarchy.group_of(p.label)!r})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
