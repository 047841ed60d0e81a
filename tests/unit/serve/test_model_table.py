"""The live model table: a model added is served at once, a replaced or dropped one keeps its
source and upstream client for the requests running on it and closes them when they end."""

from __future__ import annotations

import asyncio

from sandfleet import api
from sandfleet.serve.config import ServeConfig, ServedModel, ServerSpec
from sandfleet.serve.metrics import ServeMetrics
from sandfleet.serve.registry import Entry, ModelTable
from sandfleet.serve.served_models import to_served


def spec(max_turns: int) -> api.ServedModelSpec:
    return api.ServedModelSpec.model_validate(
        {"upstream": {"baseURL": "http://127.0.0.1:9/v1", "model": "m"}, "maxTurns": max_turns}
    )


def local_table() -> tuple[ModelTable, ServeMetrics]:
    """A table of local models (no gateway to resolve): the ServedModels' mapping, with the
    sandbox source switched to local so that nothing but the table itself is involved."""
    metrics = ServeMetrics([])
    return ModelTable(ServeConfig(ServerSpec(), {}), metrics), metrics


def local(max_turns: int, name: str = "coder") -> ServedModel:
    served = to_served("team-a", name, spec(max_turns), None)
    local_spec = served.spec.model_copy(update={"sandbox": "local", "namespace": None})
    return ServedModel(served.name, local_spec, served.agent)


def closed(entry: Entry) -> bool:
    assert entry.upstream is not None
    return bool(entry.upstream._client.is_closed())


async def test_a_model_put_is_served_and_labelled_at_once() -> None:
    table, metrics = local_table()
    table.start()
    first = local(3)
    table.put(first)
    assert table.models == {"team-a/coder": first}
    assert metrics.label("team-a/coder") == "team-a/coder"
    entry = table.entry(first)
    table.put(local(3))  # the same settings: nothing changes
    assert table.entry(first) is entry
    await table.aclose()


async def test_a_replaced_model_closes_its_client_only_after_its_last_request() -> None:
    table, _ = local_table()
    table.start()
    first = local(3)
    table.put(first)
    with table.in_use(first) as running:
        second = local(4)
        table.put(second)  # an edit: new requests get the new settings
        assert table.models["team-a/coder"] is second
        assert table.entry(first) is running  # the running request keeps its own
        await asyncio.sleep(0)
        assert not closed(running)
    for _ in range(100):  # closing runs in a task of its own
        if closed(running):
            break
        await asyncio.sleep(0.01)
    assert closed(running)
    assert not closed(table.entry(second))
    await table.aclose()


async def test_a_dropped_model_is_gone_and_its_idle_entry_closed() -> None:
    table, _ = local_table()
    table.start()
    served = local(3)
    table.put(served)
    entry = table.entry(served)
    table.drop(served.name)
    assert served.name not in table.models
    assert table.named(served.name) is None
    await table.aclose()
    assert closed(entry)
