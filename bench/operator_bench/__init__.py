"""Helpers of bench/bench_operator.py: the operator process, fake nodes, watches, the rounds."""
