"""Passage sieve: candidates with false-negative labels, the sieve (Algorithm 1), competing filters,
detection reports, figures and the negatives inspector."""
