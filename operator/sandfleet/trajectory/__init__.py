"""Trajectories: the format (format), THE torn-line JSON Lines reader (lines), writing
(writer) and reading (reader) a run's records, and the operator's store directory (store).

The format is documented in docs/trajectory-format.md. This package sits below the agent
loop, the operator and the CLI, which all use it; it imports none of them.
"""
