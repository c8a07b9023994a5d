"""Quick start with transformers: constrain generation to a set, then classify with scores.

python examples/transformers_quickstart.py [--model DIR]
"""

from __future__ import annotations

import argparse
import sys

from _common import model_argument, model_dir
from transformers import AutoModelForCausalLM, AutoTokenizer

from trierouter import TokenIndex, Vocabulary, compile_choices
from trierouter.classify import Classifier
from trierouter.router.transformers import generate


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    model_argument(parser)
    args = parser.parse_args(argv)
    path = model_dir(args.model)
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path)

    # 1. one set, compiled once for the model's tokenizer (at the model's logits width)
    width = model.get_output_embeddings().weight.shape[0]
    index = TokenIndex.get(Vocabulary.from_tokenizer(tokenizer, width=width))
    tools = compile_choices(["get_weather", "get_user", "list_orders", "refund_order"], index)
    results = generate(model, tokenizer, ["Which tool tells me if it rains?"], tools)
    print("constrained generation:", results[0].text)
    assert results[0].text in tools

    # 2. a classifier: the label and the exact log-probability of the top labels
    clf = Classifier(["positive", "negative", "neutral"], model=(model, tokenizer))
    for p in clf.classify(["I love it", "It broke after a day"], top_n=3):
        print(f"{p.text!r:28} -> {p.label:9}", [(s.label, round(s.logprob, 3)) for s in p.scores])
        assert p.label in ("positive", "negative", "neutral")
    return 0


if __name__ == "__main__":
    sys.exit(main())
