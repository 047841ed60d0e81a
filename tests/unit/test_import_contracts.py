"""The layering holds: no import cycles, and every import-linter contract in pyproject is kept."""

from __future__ import annotations

from tests.support.import_graph import build_graph, describe_cycles, import_cycles, lint_imports


def test_no_module_imports_itself_through_others() -> None:
    graph = build_graph()
    cycles = import_cycles(graph)
    assert not cycles, f"{len(cycles)} import cycle(s):\n{describe_cycles(graph, cycles)}"


def test_import_contracts_are_kept() -> None:
    result = lint_imports()
    assert result.kept, f"lint-imports exited {result.returncode}:\n{result.output}"


def test_the_shared_cluster_layer_sits_below_the_operator_and_the_gateway() -> None:
    """Named on purpose: the run above passes as well when a contract is deleted from
    pyproject, this one fails when these two go missing, not only when they break."""
    graph = build_graph()
    for importer, imported in [
        ("sandfleet.fleet", "sandfleet.operator"),
        ("sandfleet.fleet", "sandfleet.gateway"),
        ("sandfleet.operator", "sandfleet.gateway"),
        ("sandfleet.gateway", "sandfleet.operator"),
    ]:
        chains = graph.find_shortest_chains(importer=importer, imported=imported)
        assert not chains, f"{importer} imports {imported}: {sorted(chains)}"
    result = lint_imports("operator-gateway-independent", "fleet-below-operator-and-gateway")
    assert result.kept, f"lint-imports exited {result.returncode}:\n{result.output}"
    assert result.output.count("KEPT") == 2, result.output
