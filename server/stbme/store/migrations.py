"""Forward-only schema migrations: numbered functions, applied names recorded in `migrations`.

A shipped migration is never edited; a change of schema is a new function at the end.
"""

from __future__ import annotations

import json
import re
import sqlite3
import time
from typing import Callable

Migration = Callable[[sqlite3.Connection], None]
MIGRATIONS: list[tuple[str, Migration]] = []       # the sidecar's database
HUB_MIGRATIONS: list[tuple[str, Migration]] = []   # the DNA hub's own database (`stbme hub`)


def migration(fn: Migration) -> Migration:
    MIGRATIONS.append((fn.__name__, fn))
    return fn


def hub_migration(fn: Migration) -> Migration:
    HUB_MIGRATIONS.append((fn.__name__, fn))
    return fn


@migration
def m001_initial(conn: sqlite3.Connection) -> None:
    _run_script(
        conn,
        """
        CREATE TABLE chats (
            chat_id TEXT PRIMARY KEY,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL,
            processed_upto INTEGER NOT NULL DEFAULT -1,   -- last message index whose memories exist
            revision INTEGER NOT NULL DEFAULT 0,          -- bumped by every rollback: stale work is dropped
            node_rev INTEGER NOT NULL DEFAULT 0           -- bumped by every node write: index watermark
        );
        CREATE TABLE messages (
            chat_id TEXT NOT NULL,
            idx INTEGER NOT NULL,
            hash TEXT NOT NULL,
            chain TEXT NOT NULL,
            role TEXT NOT NULL,
            name TEXT NOT NULL,
            text TEXT NOT NULL,
            swipe_id INTEGER,
            send_date TEXT,
            PRIMARY KEY (chat_id, idx)
        ) WITHOUT ROWID;
        CREATE TABLE nodes (
            id TEXT PRIMARY KEY,
            chat_id TEXT NOT NULL,
            type TEXT NOT NULL,
            fields TEXT NOT NULL,
            importance REAL NOT NULL DEFAULT 5,
            weight REAL NOT NULL DEFAULT 1,
            seq_from INTEGER,
            seq_to INTEGER,
            level INTEGER NOT NULL DEFAULT 0,
            parent_id TEXT,
            children TEXT NOT NULL DEFAULT '[]',
            archived INTEGER NOT NULL DEFAULT 0,
            locked INTEGER NOT NULL DEFAULT 0,
            pinned INTEGER NOT NULL DEFAULT 0,
            scope TEXT NOT NULL DEFAULT 'objective',
            story_time TEXT,
            tags TEXT NOT NULL DEFAULT '[]',
            embedding BLOB,
            embedder TEXT,
            text_hash TEXT,
            access_count INTEGER NOT NULL DEFAULT 0,
            last_access REAL,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL,
            evolution TEXT NOT NULL DEFAULT '[]',
            source TEXT NOT NULL DEFAULT 'heuristic',
            rev INTEGER NOT NULL DEFAULT 0
        );
        CREATE INDEX nodes_by_chat ON nodes (chat_id, archived, type);
        CREATE INDEX nodes_pinned ON nodes (chat_id, pinned) WHERE pinned = 1;
        CREATE TABLE edges (
            id TEXT PRIMARY KEY,
            chat_id TEXT NOT NULL,
            from_id TEXT NOT NULL,
            to_id TEXT NOT NULL,
            relation TEXT NOT NULL,
            strength REAL NOT NULL DEFAULT 0.8,
            inhibitory INTEGER NOT NULL DEFAULT 0,
            created_at REAL NOT NULL,
            valid_at REAL,
            invalid_at REAL,
            expired_at REAL
        );
        CREATE INDEX edges_from ON edges (chat_id, from_id);
        CREATE INDEX edges_to ON edges (chat_id, to_id);
        -- Row-level undo log: the before-image of every row a message-derived change touched.
        CREATE TABLE journal (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            chat_id TEXT NOT NULL,
            batch TEXT NOT NULL,
            msg_from INTEGER,
            msg_to INTEGER,
            tbl TEXT NOT NULL,
            row_id TEXT NOT NULL,
            before TEXT,
            before_vec BLOB,
            reason TEXT NOT NULL,
            created_at REAL NOT NULL
        );
        CREATE INDEX journal_by_chat ON journal (chat_id, msg_to);
        CREATE TABLE events (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            chat_id TEXT,
            at REAL NOT NULL,
            kind TEXT NOT NULL,
            data TEXT NOT NULL DEFAULT '{}'
        );
        CREATE INDEX events_by_chat ON events (chat_id, at);
        CREATE TABLE jobs (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            chat_id TEXT NOT NULL,
            kind TEXT NOT NULL,
            state TEXT NOT NULL,                  -- pending | running | done | failed
            attempts INTEGER NOT NULL DEFAULT 0,
            error TEXT,
            payload TEXT NOT NULL DEFAULT '{}',
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL
        );
        CREATE INDEX jobs_open ON jobs (state, chat_id);
        CREATE TABLE settings (
            scope TEXT NOT NULL,                  -- '' = global, else a chat id
            name TEXT NOT NULL,
            value TEXT NOT NULL,
            PRIMARY KEY (scope, name)
        ) WITHOUT ROWID;
        CREATE TABLE embed_cache (
            embedder TEXT NOT NULL,
            text_hash TEXT NOT NULL,
            vec BLOB NOT NULL,
            PRIMARY KEY (embedder, text_hash)
        ) WITHOUT ROWID;
        -- Heuristic mode: which message mentions which candidate name (derived from messages).
        CREATE TABLE mentions (
            chat_id TEXT NOT NULL,
            name_key TEXT NOT NULL,
            idx INTEGER NOT NULL,
            PRIMARY KEY (chat_id, name_key, idx)
        ) WITHOUT ROWID;
        """
    )


@migration
def m003_dna(conn: sqlite3.Connection) -> None:
    """DNA Memory layer: memory layers, GEP genes and capsules, repair loops, per-chat DNA state."""
    _run_script(
        conn,
        """
        -- working -> short_term -> long_term (DNA Memory layers); set only by stbme.dna.dynamics
        ALTER TABLE nodes ADD COLUMN layer TEXT NOT NULL DEFAULT 'working';
        CREATE TABLE genes (
            id TEXT PRIMARY KEY,
            name TEXT NOT NULL,
            description TEXT NOT NULL DEFAULT '',
            triggers TEXT NOT NULL DEFAULT '[]',   -- [{type, pattern}]
            actions TEXT NOT NULL DEFAULT '[]',    -- [{op, ...}]
            enabled INTEGER NOT NULL DEFAULT 1,
            builtin INTEGER NOT NULL DEFAULT 0,
            origin TEXT NOT NULL DEFAULT 'local',  -- local | builtin | hub
            usage_count INTEGER NOT NULL DEFAULT 0,
            last_used REAL,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL
        );
        CREATE TABLE capsules (
            id TEXT PRIMARY KEY,
            name TEXT NOT NULL,
            description TEXT NOT NULL DEFAULT '',
            gene_ids TEXT NOT NULL DEFAULT '[]',
            strategy TEXT NOT NULL DEFAULT 'balanced',
            enabled INTEGER NOT NULL DEFAULT 1,
            builtin INTEGER NOT NULL DEFAULT 0,
            origin TEXT NOT NULL DEFAULT 'local',
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL
        );
        -- Two corrections/errors of the same thing: the model keeps making the same mistake.
        -- Rows found while processing messages are journaled (a rollback removes them).
        CREATE TABLE repair_loops (
            id TEXT PRIMARY KEY,
            chat_id TEXT NOT NULL,
            type TEXT NOT NULL,
            first_id TEXT NOT NULL,
            second_id TEXT NOT NULL,
            similarity REAL NOT NULL,
            time_gap REAL NOT NULL,
            status TEXT NOT NULL DEFAULT 'open',   -- open | resolved
            created_at REAL NOT NULL,
            resolved_at REAL
        );
        CREATE INDEX repair_loops_by_chat ON repair_loops (chat_id, status);
        CREATE TABLE dna_state (
            chat_id TEXT PRIMARY KEY,
            rng_counter INTEGER NOT NULL DEFAULT 0,  -- seeds the chat's next strategy draws
            last_decay_at REAL,
            last_reflect_at REAL,
            reflect_rev INTEGER NOT NULL DEFAULT -1  -- chats.node_rev at the last reflection
        ) WITHOUT ROWID;
        CREATE INDEX events_by_kind ON events (kind, at);
        """
    )


@migration
def m004_degraded_batches(conn: sqlite3.Connection) -> None:
    # First message of a batch processed without the LLM (it was down): redone once it answers again.
    conn.execute("ALTER TABLE chats ADD COLUMN degraded_from INTEGER")


@migration
def m005_unfinished_batches_and_llm_cursor(conn: sqlite3.Connection) -> None:
    # First message of a committed batch whose follow-up work (embedding, evolution, maintenance) has not
    # finished: a crash or a failure left it half-done, so it is undone and redone before anything else.
    conn.execute("ALTER TABLE chats ADD COLUMN unfinished_from INTEGER")
    # Last message the LLM extraction has read: it runs once per extract.llm_every assistant messages over
    # everything after this one, while the per-message memories are made for every batch.
    conn.execute("ALTER TABLE chats ADD COLUMN llm_upto INTEGER NOT NULL DEFAULT -1")


# Story days (m006): the days each memory's story time names, one row per day, derived from
# nodes.story_time by triggers, so every write of a node (the pipeline, a rollback restoring a
# before-image, an import) keeps them right without code of its own. The same SQL fills the table for the
# nodes already stored: outside a trigger, `new` is an alias of nodes.
_STORY_DATE = "json_extract(new.story_time, '$.date')"
_STORY_OWN_DAY = (
    "INSERT OR IGNORE INTO story_days (chat_id, day, node_id, mentioned)"
    f" SELECT new.chat_id, {_STORY_DATE}, new.id, 0 {{source}}"
    " WHERE CASE WHEN json_valid(new.story_time) THEN json_type(new.story_time, '$.date') = 'text'"
    f" AND date({_STORY_DATE}, '+0 days') = {_STORY_DATE} END")
_MENTION_END = "json_extract(m.value, '$[1]')"
_MENTION_START = "json_extract(m.value, '$[0]')"
_STORY_MENTIONED_DAYS = (  # a mention is a span [start, end]: one row per day, at most 31
    "INSERT OR IGNORE INTO story_days (chat_id, day, node_id, mentioned)"
    f" SELECT new.chat_id, date({_MENTION_START}, '+' || o.n || ' days'), new.id, 1"
    " FROM {source} json_each(COALESCE(CASE WHEN json_valid(new.story_time) THEN CASE WHEN"
    " json_type(new.story_time, '$.mentions') = 'array' THEN json_extract(new.story_time, '$.mentions') END END,"
    " '[]')) AS m CROSS JOIN story_day_offsets AS o"  # CROSS JOIN: mentions outside, each read once
    f" WHERE m.type = 'array' AND date({_MENTION_START}, '+0 days') = {_MENTION_START}"
    f" AND date({_MENTION_END}, '+0 days') = {_MENTION_END}"
    f" AND o.n <= julianday({_MENTION_END}) - julianday({_MENTION_START})")


@migration
def m006_story_days(conn: sqlite3.Connection) -> None:
    """Memories by story day: "memories of day D" is an index range scan, whatever the chat's size."""
    _run_script(
        conn,
        """
        CREATE TABLE story_days (
            chat_id TEXT NOT NULL,
            day TEXT NOT NULL,                    -- YYYY-MM-DD
            node_id TEXT NOT NULL,
            mentioned INTEGER NOT NULL,           -- 0: the day the memory's message was sent; 1: a day it names
            PRIMARY KEY (chat_id, day, node_id, mentioned)
        ) WITHOUT ROWID;
        CREATE INDEX story_days_by_node ON story_days (node_id);
        CREATE TABLE story_day_offsets (n INTEGER PRIMARY KEY)
        """
    )
    conn.executemany("INSERT INTO story_day_offsets (n) VALUES (?)", [(n,) for n in range(31)])
    fill = _STORY_OWN_DAY.format(source="") + ";\n" + _STORY_MENTIONED_DAYS.format(source="") + ";\n"
    # Trigger bodies hold several statements: each CREATE TRIGGER is executed whole.
    conn.execute("CREATE TRIGGER nodes_story_days_insert AFTER INSERT ON nodes WHEN new.story_time IS NOT NULL"
                 f" BEGIN {fill} END")
    conn.execute("CREATE TRIGGER nodes_story_days_update AFTER UPDATE OF story_time, chat_id ON nodes"
                 " WHEN old.story_time IS NOT new.story_time OR old.chat_id IS NOT new.chat_id"
                 f" BEGIN DELETE FROM story_days WHERE node_id = old.id;\n{fill} END")
    conn.execute("CREATE TRIGGER nodes_story_days_delete AFTER DELETE ON nodes WHEN old.story_time IS NOT NULL"
                 " BEGIN DELETE FROM story_days WHERE node_id = old.id; END")
    conn.execute(_STORY_OWN_DAY.format(source="FROM nodes AS new") + " AND new.story_time IS NOT NULL")
    conn.execute(_STORY_MENTIONED_DAYS.format(source="nodes AS new,") + " AND new.story_time IS NOT NULL")


@migration
def m007_ingest_indexes(conn: sqlite3.Connection) -> None:
    """Two lookups a long first ingest makes per message, which scanned what the chat had so far (so the
    ingest was quadratic): an edge by its two ends (before: every edge of its source; a speaker has one
    per message; the new index also serves every query of edges_from, which it replaces), and the event
    just before a message (before: every node of the chat, sorted)."""
    _run_script(
        conn,
        """
        CREATE INDEX edges_pair ON edges (chat_id, from_id, to_id, relation);
        DROP INDEX edges_from;
        CREATE INDEX nodes_by_seq ON nodes (chat_id, seq_to)
        """
    )


@migration
def m008_one_extract_every(conn: sqlite3.Connection) -> None:
    """`extract.every` (replies per batch) and `extract.llm_every` (replies per LLM extraction) became one
    setting, `extract.every`: how many replies the memory LLM waits for. A stored pair becomes the cadence it
    ran at (the LLM ran at the first batch end after `llm_every` replies: every * ceil(llm_every / every)),
    for all chats and for each chat with its own value of either."""
    def stored(scope: str) -> dict[str, int]:
        out = {}
        for name, raw in conn.execute("SELECT name, value FROM settings WHERE scope = ? AND name IN"
                                      " ('extract.every', 'extract.llm_every')", (scope,)):
            try:
                value = json.loads(raw)
            except ValueError:
                continue
            if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 50:
                out[name] = value
        return out

    def cadence(every: int, llm_every: int) -> int:
        return min(50, every * -(-llm_every // every))

    glob = stored("")
    glob_every, glob_llm = glob.get("extract.every", 1), glob.get("extract.llm_every", 3)
    scopes = [row[0] for row in conn.execute(
        "SELECT DISTINCT scope FROM settings WHERE name IN ('extract.every', 'extract.llm_every')")]
    for scope in scopes:
        own = stored(scope)
        conn.execute("DELETE FROM settings WHERE scope = ? AND name IN ('extract.every', 'extract.llm_every')",
                     (scope,))
        if scope == "":
            value = cadence(glob_every, glob_llm)
        elif own:
            value = cadence(own.get("extract.every", glob_every), own.get("extract.llm_every", glob_llm))
        else:
            continue  # only unreadable values: the chat follows the global setting
        conn.execute("INSERT INTO settings (scope, name, value) VALUES (?, 'extract.every', ?)",
                     (scope, json.dumps(value)))


@migration
def m012_speaker_text(conn: sqlite3.Connection) -> None:
    """A message's memory is now searched and embedded as "Speaker: text" (graph/attribution.py): the
    vectors of those stored before are marked as not the current embedder's, so the background embedding
    pass (housekeeping, newest messages first) embeds them again; until then keyword search finds them.
    The saved keyword indexes are rebuilt on load (index/lexical.SAVE_VERSION 2)."""
    conn.execute("UPDATE nodes SET embedder = NULL WHERE type = 'event' AND embedding IS NOT NULL"
                 " AND json_extract(fields, '$.speaker') IS NOT NULL")


@migration
def m009_process_through(conn: sqlite3.Connection) -> None:
    # Messages up to this index are processed even without the reply that would end their batch: the
    # chat was brought in whole (`stbme ingest`) or the user asked to remember all of it now. A chat
    # change at or before it lowers it (pipeline/sync.py): the request was about the old messages.
    conn.execute("ALTER TABLE chats ADD COLUMN process_through INTEGER NOT NULL DEFAULT -1")


@migration
def m013_insisted_directives_fade(conn: sqlite3.Connection) -> None:
    """The built-in gene for what the user insists on ('always', 记住...) gave its directive a head start
    instead of a pin, so the chat's strategy decays it too (issue 22). A database made before keeps the
    gene as the code defined it then: move it on, unless the user edited it. Directives it pinned stay
    pinned (that was the user's data by now)."""
    row = conn.execute("SELECT actions FROM genes WHERE id = 'gene_insist_pin' AND builtin = 1").fetchone()
    if row is None or json.loads(row[0]) != [{"op": "create_directive", "importance": 8}, {"op": "update_target"},
                                             {"op": "pin"}]:
        return
    # The definition as it is from here on (dna/assets.py); a later change is a new migration.
    conn.execute(
        "UPDATE genes SET name = ?, description = ?, actions = ?, updated_at = ? WHERE id = 'gene_insist_pin'",
        ("Hold on to what the user insists on",
         "A preference, workflow or correction with 'always', 'never', 'must', 'remember' (一定, 必须, 永远, 记住) "
         "becomes an important directive with a head start: it starts at weight 0.8 instead of 0.5, so it lasts "
         "longer before it fades (pin it to keep it for good).",
         json.dumps([{"op": "create_directive", "importance": 8}, {"op": "update_target"},
                     {"op": "reinforce", "amount": 0.3}]), time.time()))


@migration
def m014_keep_float32_vectors(conn: sqlite3.Connection) -> None:
    """The bundled model's default became int8 products (`embed.local_weights`), another vector space. A
    database that already holds float32 vectors keeps float32, stored as its own setting, so an upgrade
    re-embeds nothing and recall keeps its vectors; the user can switch in the panel (a background
    re-embed). A database without them (a new one) takes the new default. The ids are written out: a
    shipped migration must not follow later changes of the embed package."""
    if conn.execute("SELECT 1 FROM settings WHERE scope = '' AND name = 'embed.local_weights'").fetchone():
        return
    float32_id = "local:multilingual-e5-small-q4"
    if conn.execute("SELECT 1 FROM nodes WHERE embedder = ? LIMIT 1", (float32_id,)).fetchone() is None:
        return
    conn.execute("INSERT INTO settings (scope, name, value) VALUES ('', 'embed.local_weights', ?)",
                 (json.dumps("float32"),))


@migration
def m015_unembedded_index(conn: sqlite3.Connection) -> None:
    """The memories still without a vector, by chat and message: the embedding pass asks for the newest 64
    of them again and again, and found them by walking every memory of the chat newest first, past the
    ones already embedded (a first ingest's embedding was quadratic in the chat's length). Vectors of
    another embedder are looked up apart (store/queries.unembedded_nodes) in the second index, whose
    entries answer the lookup without reading the rows (and their vectors)."""
    _run_script(
        conn,
        """
        CREATE INDEX nodes_unembedded ON nodes (chat_id, seq_to) WHERE embedding IS NULL AND archived = 0;
        CREATE INDEX nodes_by_embedder ON nodes (chat_id, embedder, seq_to) WHERE embedding IS NOT NULL AND archived = 0
        """
    )


# The texts m016's change of graph/attribution.py can read otherwise (a superset): a capitalised word inside a
# sentence, a comma and a name at the sentence's end ("to Tulum, Mexico."); a sentence's first word, a comma
# and a name ("Paris, France is", "Absolutely, Liza!").
_WORD = r"[A-Z][a-zA-Z'\-]*[a-z]"
_NAME_PAIR = re.compile(rf"(?<=[^\s.!?…] ){_WORD},\s*{_WORD}(?:\s{_WORD})?\s*(?:[!?.…~]|$)"
                        rf"|(?:^|(?<=[.!?…]\s)){_WORD}(?:\s{_WORD})?,\s+(?!I'){_WORD}\b")


@migration
def m016_name_pairs_are_not_addressed(conn: sqlite3.Connection) -> None:
    """A name paired with a capitalised word across a comma ("we went to Tulum, Mexico.", "Paris, France is
    lovely") is no longer taken for a name the speaker only addresses and left out of the searched and
    embedded text (graph/attribution.py). The message memories whose text has such a pair are embedded
    again, as m012 did; the saved keyword indexes are rebuilt on load (index/lexical.SAVE_VERSION 4)."""
    rows = conn.execute("SELECT id, json_extract(fields, '$.summary') FROM nodes WHERE type = 'event'"
                        " AND embedding IS NOT NULL AND json_extract(fields, '$.speaker') IS NOT NULL").fetchall()
    conn.executemany("UPDATE nodes SET embedder = NULL WHERE id = ?",
                     [(node_id,) for node_id, text in rows if isinstance(text, str) and _NAME_PAIR.search(text)])


@migration
def m017_ranking_index(conn: sqlite3.Connection) -> None:
    """What recall ranks its ~200 candidates by, in an index of its own (store/queries.RANKING_INDEX). Read
    from the rows, each candidate costs a page of its own (a row holds the memory's text and vector) and most
    of them miss SQLite's cache; the index's entries fill a few pages (read 2.2x faster at 10k memories). A
    name anchor's text, the one column it lacks, is still read from its row, for those rows only."""
    conn.execute("CREATE INDEX nodes_ranking ON nodes"
                 " (id, chat_id, archived, type, importance, weight, seq_from, seq_to, pinned, source)")


@migration
def m018_mentions_that_may_be_words(conn: sqlite3.Connection) -> None:
    """A mention whose name only starts sentences and is a common word in lowercase ("Wow", "Something") is
    marked: such mentions alone do not make a name an anchor (pipeline/heuristic.py). Earlier mentions count
    as before."""
    conn.execute("ALTER TABLE mentions ADD COLUMN maybe_word INTEGER NOT NULL DEFAULT 0")


# The texts m019's change of graph/attribution.py can read otherwise (a superset): a Chinese greeting or a
# person's title, and a comma; a company's suffix after a comma (", Inc.").
_CJK_ADDRESS = re.compile("(?:谢谢|謝謝|谢了|謝了|多谢|多謝|你好|您好|嗨|哈喽|哈囉|嘿|喂|早安|早上好|午安|晚安|晚上好|再见|再見|"
                          "拜拜|回头见|回頭見|对不起|對不起|抱歉|恭喜|欢迎|歡迎|辛苦了|亲爱的|親愛的|先生|小姐|女士|夫人|大人|"
                          "殿下|陛下|老师|老師|队长|隊長)")
_SUFFIX_AFTER_COMMA = re.compile(r",\s*(?:Inc|Ltd|Corp)\b")


@migration
def m019_chinese_vocatives(conn: sqlite3.Connection) -> None:
    """A Chinese name the speaker only addresses ("谢谢你，艾琳！", "请坐，张先生。") is left out of the searched
    and embedded text, as English ones are (graph/attribution.py). The message memories whose text may hold one
    are embedded again, as m016 did; the saved keyword indexes are rebuilt on load (index/lexical.SAVE_VERSION 5).
    A company's suffix after a comma (", Inc.") is no longer taken for a name addressed either."""
    rows = conn.execute("SELECT id, json_extract(fields, '$.summary') FROM nodes WHERE type = 'event'"
                        " AND embedding IS NOT NULL AND json_extract(fields, '$.speaker') IS NOT NULL").fetchall()
    conn.executemany("UPDATE nodes SET embedder = NULL WHERE id = ?",
                     [(node_id,) for node_id, text in rows
                      if isinstance(text, str) and (("，" in text or "," in text) and _CJK_ADDRESS.search(text)
                                                    or _SUFFIX_AFTER_COMMA.search(text))])


# m020's copy of graph/attribution.py's rule as it was then: a name standing alone between commas or a
# sentence's edges. A migration keeps the rule it was written with.
_CLAUSE = ("(?:^|(?<=[。！？!?…\n，,—]))[\\s“\"「『*]*({names})"
           "(?=\\s*[，,！!。？?~～…—]|[ \\t]*(?:\n|$))")


@migration
def m020_chat_names_addressed(conn: sqlite3.Connection) -> None:
    """A message's memory keeps, as `addressed`, the Chinese names of the chat's earlier speakers (and its own
    time's) that it addresses as a clause of their own ("艾琳，你来了？"); its searched and embedded text leaves
    them out (graph/attribution.py). Written for the memories made before, which are embedded again; the saved
    keyword indexes are rebuilt on load (index/lexical.SAVE_VERSION 6). The names of a chat's messages get an
    index: the write path reads the names spoken before each batch (pipeline/heuristic.speakers_before)."""
    conn.execute("CREATE INDEX messages_names ON messages (chat_id, name)")
    names: dict[str, list[tuple[str, int]]] = {}
    for chat_id, name, first in conn.execute("SELECT chat_id, trim(name), min(idx) FROM messages GROUP BY chat_id,"
                                             " trim(name)"):
        if len(name) >= 2 and re.search("[\u4e00-\u9fff]", name):
            names.setdefault(chat_id, []).append((name, first))
    for chat_id, spoken in names.items():
        rows = conn.execute("SELECT id, seq_from, fields FROM nodes WHERE chat_id = ? AND type = 'event' AND"
                            " seq_from IS NOT NULL AND json_extract(fields, '$.speaker') IS NOT NULL", (chat_id,))
        for node_id, seq, raw in rows.fetchall():
            fields = json.loads(raw)
            text, speaker = fields.get("summary"), str(fields.get("speaker")).strip()
            known = sorted((n for n, first in spoken if first <= seq and n != speaker), key=lambda n: (-len(n), n))
            if not isinstance(text, str) or not any(n in text for n in known):
                continue
            pattern = re.compile(_CLAUSE.format(names="|".join(map(re.escape, known))))
            addressed = sorted({m.group(1) for m in pattern.finditer(text)})
            if addressed:
                fields["addressed"] = addressed
                conn.execute("UPDATE nodes SET fields = ?, embedder = NULL WHERE id = ?",
                             (json.dumps(fields, ensure_ascii=False, separators=(",", ":")), node_id))


@hub_migration
def h001_hub(conn: sqlite3.Connection) -> None:
    _run_script(
        conn,
        """
        -- IF NOT EXISTS: hub files written before the hub had migrations already hold these tables.
        -- Sidecars seen by the hub: numbers only, never chat content.
        CREATE TABLE IF NOT EXISTS hub_nodes (
            node_id TEXT PRIMARY KEY,
            first_seen REAL NOT NULL,
            last_seen REAL NOT NULL,
            heartbeats INTEGER NOT NULL,
            stats TEXT NOT NULL,
            capabilities TEXT NOT NULL,
            version TEXT
        );
        -- Published genes and capsules (templates).
        CREATE TABLE IF NOT EXISTS hub_assets (
            kind TEXT NOT NULL,
            id TEXT NOT NULL,
            node_id TEXT NOT NULL,
            data TEXT NOT NULL,
            published_at REAL NOT NULL,
            PRIMARY KEY (kind, id)
        )
        """
    )


def _run_script(conn: sqlite3.Connection, script: str) -> None:
    # Not executescript(): it COMMITs first, which would split the migration's transaction.
    for statement in script.split(";\n"):
        if statement.strip():
            conn.execute(statement)


def schema_version(conn: sqlite3.Connection) -> int:
    return conn.execute("SELECT count(*) FROM migrations").fetchone()[0]


def migrate(conn: sqlite3.Connection, migrations: list[tuple[str, Migration]] = MIGRATIONS) -> list[str]:
    """Apply every migration not yet recorded, each in its own transaction. Returns the names applied."""
    conn.execute("CREATE TABLE IF NOT EXISTS migrations (name TEXT PRIMARY KEY, applied_at REAL NOT NULL)")
    done = {row[0] for row in conn.execute("SELECT name FROM migrations")}
    known = {name for name, _ in migrations}
    unknown = done - known
    if unknown:
        raise RuntimeError(
            f"this database was written by a newer stbme (migrations {sorted(unknown)}); upgrade stbme"
        )
    applied = []
    for name, fn in migrations:
        if name in done:
            continue
        conn.execute("BEGIN IMMEDIATE")
        try:
            fn(conn)
            conn.execute("INSERT INTO migrations (name, applied_at) VALUES (?, ?)", (name, time.time()))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        applied.append(name)
    return applied
