"""DNA reinforcement of injected memories is counted in memory and written in one transaction, off the
read path (recall/reinforce.py)."""

import pytest

from stbme.policy import REINFORCE_STEP
from stbme.recall.reinforce import FLUSH_AT, Reinforcement

from conftest import wait_for


async def _node(sidecar, node_id: str, weight: float = 0.5):
    await sidecar.store.write(lambda conn: conn.execute(
        "INSERT OR IGNORE INTO chats (chat_id, created_at, updated_at) VALUES ('c', 0, 0)"))
    await sidecar.store.write(lambda conn: conn.execute(
        "INSERT INTO nodes (id, chat_id, type, fields, weight, created_at, updated_at)"
        " VALUES (?, 'c', 'event', '{\"summary\": \"x\"}', ?, 0, 0)", (node_id, weight)))


async def _row(sidecar, node_id: str):
    return await sidecar.store.read(lambda conn: conn.execute(
        "SELECT access_count, weight, last_access FROM nodes WHERE id = ?", (node_id,)).fetchone())


async def test_injections_are_written_together_later_and_each_counts(sidecar):
    await _node(sidecar, "a")
    reinforcement = Reinforcement(sidecar.store)
    seq = sidecar.store.write_seq
    reinforcement.injected(["a"])
    reinforcement.injected(["a"])
    assert sidecar.store.write_seq == seq   # nothing written on the recall's path
    assert (await _row(sidecar, "a"))[0] == 0

    async def written():
        row = await _row(sidecar, "a")
        return row if row[0] else None

    access_count, weight, last_access = await wait_for(written, "the counted injections to be written")
    assert access_count == 2 and weight == pytest.approx(0.5 + 2 * REINFORCE_STEP) and last_access


async def test_many_waiting_are_written_at_once_and_close_writes_the_rest(sidecar):
    ids = [f"n{i}" for i in range(FLUSH_AT + 1)]
    for node_id in ids:
        await _node(sidecar, node_id, weight=0.99)
    reinforcement = Reinforcement(sidecar.store)
    reinforcement.injected(ids[:FLUSH_AT])          # enough waiting: queued at once
    await sidecar.store.write(lambda conn: None)
    assert (await _row(sidecar, ids[0]))[:2] == (1, 1.0)   # capped at 1
    reinforcement.injected(ids[FLUSH_AT:])
    reinforcement.close()
    await sidecar.store.write(lambda conn: None)
    assert (await _row(sidecar, ids[-1]))[0] == 1
