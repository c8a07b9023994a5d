"""Beyond 50,000 values: embedding shortlists and sqrt(K) grouping (not implemented yet)."""

__all__: list[str] = []
