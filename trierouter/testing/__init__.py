"""Independent oracles used by the tests and the equivalence sweep (XGrammar, brute force)."""
