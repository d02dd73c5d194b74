"""Memories made from messages have ids made of what they come from: the same chat brought in twice holds
the same ids and ranks the same way (every ranking breaks its ties by id), and an id already taken never
loses a memory."""

from __future__ import annotations

import sqlite3

from conftest import HashEmbedder, full_sync, recall, settle

from stbme.graph.changes import ChangeSet
from stbme.graph.model import Node, stable_id
from stbme.services import Services

LONG = ("Mara counts the lanterns on the pier and tells Ivo about the storm that took her father's boat. "
        "She keeps his compass in a tin box under the floorboards of the lighthouse. ") * 6
CHAT = [
    {"role": "user", "name": "Ivo", "text": "Thanks, Mara!"},
    {"role": "assistant", "name": "Mara", "text": LONG},
    {"role": "user", "name": "Ivo", "text": "Thanks, Mara!"},       # the same short turn again: a tie
    {"role": "assistant", "name": "Mara", "text": "Thanks, Ivo! The compass still points home."},
    {"role": "user", "name": "Ivo", "text": "Where does she keep the compass?"},
    {"role": "assistant", "name": "Mara", "text": "In the tin box, where it always was."},
    # The user steering the story: DNA directives, memories of their own
    {"role": "user", "name": "Ivo", "text": "Quick correction, Mara's hair is grey, not brown. (OOC: please stop "
                                            "ending every reply with a question.)"},
] + [{"role": "user" if i % 2 == 0 else "assistant", "name": "Ivo" if i % 2 == 0 else "Mara",
      "text": f"The gulls circle the harbour wall, turn {i}."} for i in range(12)]   # recall skips the newest


async def _brought_in(path) -> tuple[list[tuple], list[str]]:
    sc = Services.open(path, embedder=HashEmbedder())
    await sc.start()
    try:
        await full_sync(sc, "harbour", CHAT)
        await settle(sc, "harbour")
        nodes = await sc.store.read(lambda conn: [tuple(r) for r in conn.execute(
            "SELECT id, type, seq_to, fields FROM nodes WHERE chat_id = 'harbour' ORDER BY id")])
        # Loaded first: under load a recall that finds the index still loading answers from keywords alone.
        await sc.indexes.vectors.get("harbour")
        found = await recall(sc, "harbour", {"query": "Thanks, Mara! Where is the compass?", "reinforce": False})
        return nodes, [m["id"] for m in found["memories"]]
    finally:
        await sc.close()


async def test_the_same_chat_brought_in_twice_has_the_same_ids_and_ranking(tmp_path):
    first, second = await _brought_in(tmp_path / "a"), await _brought_in(tmp_path / "b")
    nodes, ranked = first
    assert sum(n[1] == "event" for n in nodes) > len(CHAT), "the long message is cut into several memories"
    assert {"correction", "preference"} <= {n[1] for n in nodes}, "the directives have ids of the same kind"
    assert first == second and ranked


def test_an_id_already_taken_keeps_the_memory_under_a_random_one(tmp_path):
    from stbme.store.migrations import migrate

    conn = sqlite3.connect(tmp_path / "db.sqlite3", isolation_level=None)
    conn.row_factory = sqlite3.Row
    migrate(conn)
    taken = stable_id("n", "harbour", 3, 0, "Thanks, Ivo!")
    cs = ChangeSet(conn, "harbour", reason="test")
    cs.insert_node(Node(id=taken, chat_id="harbour", type="event", fields={"summary": "Thanks, Ivo!"}))
    again = cs.insert_node(Node(id=taken, chat_id="harbour", type="event", fields={"summary": "Thanks, Ivo!"}))
    assert again.id != taken and again.id.startswith("n_") and set(cs.created_nodes) == {taken, again.id}
    assert conn.execute("SELECT count(*) FROM nodes").fetchone()[0] == 2
