"""Settings: one table of definitions drives defaults, validation, per-chat overrides, the schema
endpoint the extension renders, `--setting` on the CLI and docs/settings.md."""

from __future__ import annotations

from typing import Any

import orjson

from .errors import BadRequest
from .origins import check_host_names, check_http_url, check_origins
from .patterns import PatternError, check_pattern, split_patterns
from .policy import STRATEGIES
from .setting_spec import Setting, SettingValue


def _check_patterns(value: str) -> None:
    for pattern in split_patterns(value):
        try:
            check_pattern(pattern)
        except PatternError as exc:
            raise ValueError(f"pattern {pattern!r}: {exc}") from None


S = Setting
SETTINGS: tuple[Setting, ...] = (
    # server
    S("server.cors_origins", ["http://127.0.0.1:8000", "http://localhost:8000"], "list",
      "Browser origins (the SillyTavern page, scheme://host[:port]) allowed to call the sidecar directly; a "
      "request from any other page is refused (403). '*' allows every page, and is honoured only when the "
      "sidecar requires a token (docs/security.md).", check=check_origins),
    S("server.extra_cors_origins", [], "list",
      "More browser origins allowed besides server.cors_origins, e.g. SillyTavern opened at "
      "http://192.168.1.10:8000. Adding one here keeps the default origins.", check=check_origins),
    S("server.allowed_hosts", [], "list",
      "Host names, besides localhost, 127.0.0.1 and ::1, a loopback sidecar without a token answers to (the "
      "Host header; anything else is refused against DNS rebinding). Add the name you reach it by, e.g. "
      "st-box.lan.", check=check_host_names),
    S("server.body_timeout_s", 60.0, "float",
      "A request body that has not fully arrived after this many seconds is refused (408).", min=1, max=3600),
    S("server.max_body_bytes", 32 * 1024 * 1024, "int", "Largest request body accepted, in bytes.",
      min=1024, max=1024 * 1024 * 1024, restart=True),
    S("server.max_sync_messages", 2000, "int", "Most messages one sync request may carry.", min=1, max=100000),
    S("server.max_message_chars", 200000, "int", "Longest message text accepted, in characters.",
      min=100, max=10_000_000),
    S("server.max_accounts", 100, "int",
      "Most SillyTavern accounts (ST's multi-user mode) this sidecar keeps a memory for; a new account past "
      "it is refused (403) until one is removed from <data dir>/accounts/.", min=1, max=100000),
    # embeddings
    S("embed.provider", "local", "choice",
      "Embedding model: 'local' (bundled multilingual-e5-small, no network) or 'openai' "
      "(any OpenAI-compatible /v1/embeddings). Changing it re-embeds every memory in the background.",
      choices=("local", "openai")),
    S("embed.openai_url", "", "str", "Base URL of an OpenAI-compatible embeddings API, e.g. http://127.0.0.1:11434/v1.",
      check=check_http_url),
    S("embed.openai_key", "", "str", "API key for the embeddings API (empty for local servers).", secret=True),
    S("embed.openai_model", "text-embedding-3-small", "str", "Embedding model name for the OpenAI-compatible API."),
    S("embed.local_weights", "int8", "choice",
      "How the bundled model multiplies: 'int8' (quantized products: three times the memories per second "
      "and half the query time of float32, the same recall on the evaluation sets) or 'float32' (its 4-bit "
      "weights expanded; a data directory made before int8 was the default keeps it, so an upgrade re-embeds "
      "nothing). Changing it re-embeds every memory in the background.", choices=("int8", "float32")),
    S("embed.batch_size", 32, "int", "Texts per embedding call.", min=1, max=2048),
    S("embed.timeout_s", 30.0, "float", "Timeout of one embedding HTTP call, in seconds.", min=1, max=600),
    S("embed.retries", 3, "int", "Retries of a failed embedding HTTP call (with backoff).", min=0, max=10),
    # extraction (write path)
    S("extract.enabled", True, "bool", "Turn new chat messages into memories.", per_chat=True),
    S("extract.every", 3, "int",
      "With a memory LLM: it reads the new messages once this many replies have come (1 = after every reply; "
      "the smart trigger reads earlier on a plot turn). Every message still gets its own searchable memory "
      "at once, and the replies the LLM has not read yet are still in the prompt. Without an LLM: no effect.",
      min=1, max=50, per_chat=True),
    S("extract.chunk_tokens", 120, "int",
      "A message longer than this is stored as several event memories, each embedded whole (the local model "
      "reads 128 tokens of a passage); a recall shows a message once, by its best piece. Measured: vectors "
      "find twice the evidence at 120 as at 350 (docs/evaluation.md).", min=50, max=4000),
    # recall (read path)
    S("recall.enabled", True, "bool", "Return memories before each generation.", per_chat=True),
    S("recall.budget_tokens", 800, "int", "Token budget of the injected memory block.",
      min=50, max=16000, per_chat=True),
    S("recall.max_memories", 12, "int", "Most recalled memories (evidence) in the block; pinned memories, rules, "
      "the synopsis and directives come on top, within the budget.", min=1, max=200, per_chat=True),
    S("recall.directive_share", 0.2, "float", "Most of the budget the user's directives may take: they have "
      "their own section and never crowd out the recalled evidence.", min=0, max=1, per_chat=True),
    S("recall.line_tokens", 80, "int", "A recalled memory longer than this is shown in the block by its "
      "sentences that share the question's rarer words, each with the sentence after it (more memories fit); "
      "0 = whole texts.", min=0, max=4000, per_chat=True),
    S("recall.query_cleanup", True, "bool", "Search with the user's input without its roleplay actions "
      "(*I sit down.*), split into its parts when it asks several things.", per_chat=True),
    S("recall.recent_turns", 3, "int", "Recent turns read to resolve a reference in the input (\"what did she "
      "say about it?\" borrows the names of the last turn); they are never searched themselves.",
      min=0, max=20),
    S("recall.max_query_tokens", 2048, "int",
      "Longest recall input (and recent turn) read, in tokens: only the end of a longer one is used. A long "
      "input is searched by its last line first, then by the parts of the rest with the chat's rarer words "
      "(at most four parts of about 64 tokens each), so a pasted scene keeps what it says and what it ends by "
      "asking leads.", min=16, max=100000),
    S("recall.exclude_recent_messages", 4, "int",
      "Skip memories of the last N messages: they are still in the prompt.", min=0, max=200, per_chat=True),
    S("recall.in_prompt_tokens", 1000, "int",
      "Skip memories of the greeting (the messages before the user's first) while the whole chat is shorter "
      "than this many tokens: SillyTavern drops the oldest messages only when the context is full, so the "
      "greeting of a short chat is in the prompt already. Keep it below the chat history your context holds; "
      "0 = off.", min=0, max=1_000_000, per_chat=True),
    S("recall.language", "auto", "choice", "Language of the block's section headings.",
      choices=("auto", "en", "zh"), per_chat=True),
    # injection (used by the extension)
    S("inject.position", "in_chat", "choice",
      "Where the extension puts the block: in chat at a depth, in the prompt, or before the prompt.",
      choices=("in_chat", "in_prompt", "before_prompt"), per_chat=True),
    S("inject.depth", 4, "int", "Depth (messages from the end) for in-chat injection.", min=0, max=9999, per_chat=True),
    S("inject.role", "system", "choice", "Role of the injected block.",
      choices=("system", "user", "assistant"), per_chat=True),
    # index
    S("index.m", 16, "int", "HNSW M (graph degree) for new indexes.", min=4, max=96),
    S("index.ef_construction", 128, "int", "HNSW ef_construction for new indexes.", min=16, max=1000),
    S("index.ef_search", 256, "int", "HNSW ef at query time, for chats of more than 10,000 memories (smaller ones are "
      "scanned exactly). Recall@10 against an exact scan on real chat vectors, M 16: 0.991 at 30k memories, 0.978 at "
      "100k; 128 gave 0.975 and 0.954.", min=10, max=2000),
    S("index.save_every_s", 30.0, "float", "Save changed indexes to disk at most this often, in seconds.",
      min=1, max=3600),
    # LLM (issue 4): clients
    S("llm.mode", "none", "choice",
      "Memory LLM: 'none' (heuristic memories only), 'openai' (any OpenAI-compatible /v1/chat/completions) "
      "or 'relay' (the extension runs each request on your current SillyTavern connection; no second key).",
      choices=("none", "openai", "relay")),
    S("llm.url", "", "str", "Base URL of an OpenAI-compatible chat API, e.g. https://api.openai.com/v1 or "
      "http://127.0.0.1:11434/v1 (llm.mode = openai).", check=check_http_url),
    S("llm.key", "", "str", "API key of the chat API (empty for local servers).", secret=True),
    S("llm.model", "", "str", "Model name for the chat API, e.g. gpt-4o-mini or deepseek-chat."),
    S("llm.temperature", 0.2, "float", "Sampling temperature of memory tasks.", min=0, max=2),
    S("llm.max_tokens", 1200, "int", "Most completion tokens of one memory task.", min=64, max=64000),
    S("llm.timeout_s", 120.0, "float", "Timeout of one LLM HTTP call, in seconds.", min=1, max=3600),
    S("llm.concurrency", 2, "int", "Most LLM calls in flight at once.", min=1, max=32),
    S("llm.retries", 2, "int", "Retries of a failed LLM HTTP call (429, 5xx, timeout), with backoff.", min=0, max=10),
    S("llm.json_retries", 1, "int",
      "Retries of an answer that is not JSON (the bad answer is sent back with a strict-JSON reminder); "
      "extraction gets one more.", min=0, max=5),
    S("llm.degrade_when_down", True, "bool",
      "When the memory LLM is unreachable, process messages without it (heuristic memories, directives) and "
      "redo those batches once it answers again; off: wait (the job is retried, then parked).", per_chat=True),
    S("llm.redo_degraded_after_s", 300.0, "float",
      "How often to try redoing batches made without the LLM (it was down, or its answer unreadable), in seconds.",
      min=5, max=86400),
    S("llm.relay_timeout_s", 600.0, "float",
      "llm.mode = relay: how long to wait for the extension to answer one request of llm.max_tokens, in seconds "
      "(a request for more tokens, such as a cut answer's retry, waits in proportion). Long enough for a local "
      "model on a CPU (180 s cut a 135M model off mid-answer).", min=5, max=3600),
    # LLM extraction
    S("extract.context_turns", 2, "int",
      "LLM extraction: earlier turns (user + assistant pairs) shown as context before the new messages.",
      min=0, max=20, per_chat=True),
    S("extract.exclude_tags", "think,analysis,reasoning", "str",
      "Tags whose blocks (<think>...</think>) are removed from messages before extraction, comma-separated."),
    S("extract.existing_memories", 12, "int",
      "LLM extraction: most existing memories shown to the LLM (so it updates instead of duplicating).",
      min=0, max=60),
    S("extract.smart_trigger", True, "bool",
      "Let the memory LLM read the new messages early when they look like a plot turn (keywords, patterns, "
      "names), before extract.every replies have come.", per_chat=True),
    S("extract.trigger_patterns", "", "str",
      "Extra smart-trigger regular expressions, comma- or newline-separated (case-insensitive, RE2 syntax: no "
      "backreferences or lookaround).", per_chat=True, check=lambda value: _check_patterns(value)),
    S("extract.smart_threshold", 3, "int", "Smart-trigger score that starts an extraction (plot-turn words up to "
      "2, a trigger pattern 2, role switches 1, '!?' 1, a name 1).", min=1, max=10, per_chat=True),
    # dedupe
    S("dedupe.enabled", True, "bool", "Ask the LLM whether a new memory very similar to an old one is new, a "
      "correction (merge) or a duplicate (skip).", per_chat=True),
    S("dedupe.threshold", 0.85, "float", "Cosine similarity from which a new memory is checked for duplicates.",
      min=0.5, max=1),
    S("dedupe.neighbors", 3, "int", "Nearest existing memories shown per new memory in the duplicate check.",
      min=1, max=10),
    # A-MEM evolution
    S("evolve.enabled", True, "bool",
      "A-MEM evolution: let each new memory re-read its nearest old memories (links, context, tags).",
      per_chat=True),
    S("evolve.mode", "with_extraction", "choice",
      "'with_extraction': the extraction call also answers the evolution of the memories it creates against the "
      "existing memories it was shown (no extra call); 'separate': one more call per batch after embedding, "
      "each new memory shown with its nearest memories by vector (the seed's procedure).",
      choices=("with_extraction", "separate"), per_chat=True),
    S("evolve.neighbors", 5, "int", "Nearest old memories re-read per new memory.", min=1, max=20),
    S("evolve.min_similarity", 0.3, "float",
      "Old memories less similar than this (cosine) to the new one are not shown for evolution.", min=0, max=1),
    # maintenance
    S("maintain.summary_every", 3, "int",
      "Write a small summary of the recent story every N extractions (0 = off); summaries roll up in levels. "
      "In LLM mode an extraction is extract.every replies.",
      min=0, max=100, per_chat=True),
    S("maintain.summary_fan_in", 3, "int", "Summaries of one level folded into one of the next level.",
      min=2, max=10),
    S("maintain.synopsis_every", 5, "int", "Rewrite the story synopsis every N extractions (0 = off).",
      min=0, max=100, per_chat=True),
    S("maintain.reflect_every", 10, "int", "Write a reflection (insight, trigger, suggestion) every N "
      "extractions (0 = off).", min=0, max=200, per_chat=True),
    S("maintain.compress_every", 10, "int",
      "Compress old LLM events, threads and reflections into summary nodes every N extractions (0 = off).",
      min=0, max=200, per_chat=True),
    # prompts (empty = the built-in default, shown in docs)
    S("prompts.extract", "", "str", "Override of the extraction instructions (empty = built-in default)."),
    S("prompts.dedupe", "", "str", "Override of the duplicate-check instructions (empty = built-in default)."),
    S("prompts.evolve", "", "str", "Override of the A-MEM evolution instructions (empty = built-in default)."),
    S("prompts.summary", "", "str", "Override of the small-summary instructions (empty = built-in default)."),
    S("prompts.rollup", "", "str", "Override of the summary roll-up instructions (empty = built-in default)."),
    S("prompts.synopsis", "", "str", "Override of the synopsis instructions (empty = built-in default)."),
    S("prompts.reflect", "", "str", "Override of the reflection instructions (empty = built-in default)."),
    S("prompts.compress", "", "str", "Override of the compression instructions (empty = built-in default)."),
    S("prompts.rerank", "", "str", "Override of the recall rerank instructions (empty = built-in default)."),
    # recall rerank
    S("recall.rerank", False, "bool", "Let the LLM pick the most relevant memories among the top candidates "
      "(adds one LLM call, and its latency, to every recall).", per_chat=True),
    S("recall.rerank_pool", 20, "int", "Candidates shown to the LLM rerank.", min=2, max=60),
    S("recall.rerank_timeout_s", 8.0, "float",
      "A rerank slower than this is abandoned and the scored order is used.", min=0.5, max=120),
    # DNA Memory layer (issue 5): every key of the DNA Memory v3 config, same defaults
    S("dna.decay_days", 7, "int", "A memory unused for more than this many days starts to decay.",
      min=0, max=3650, per_chat=True),
    S("dna.decay_rate", 0.1, "float", "Weight (0-1) a decaying memory loses per idle day.", min=0, max=1,
      per_chat=True),
    S("dna.forget_threshold", 0.2, "float",
      "A memory whose weight falls below this is archived (never deleted; restore it from the memory browser).",
      min=0, max=1, per_chat=True),
    S("dna.reflect_trigger", 20, "int", "Reflect (consolidate memory layers, look for repair loops) after this "
      "many new memories, without waiting for the interval.", min=1, max=100000, per_chat=True),
    S("dna.max_short_term", 100, "int",
      "Short-term layer capacity: beyond it the oldest short-term memories move to long-term.",
      min=1, max=1_000_000, per_chat=True),
    S("dna.max_long_term", 500, "int", "Long-term layer capacity: beyond it the weakest memories idle for "
      "more than dna.decay_days are archived.", min=1, max=10_000_000, per_chat=True),
    S("dna.embedding_model", "text-embedding-3-small", "str",
      "Kept for DNA Memory config compatibility; the DNA layer compares texts with the sidecar's own embedder "
      "(embed.provider, embed.openai_model), so this value has no effect."),
    S("dna.auto_reflect", True, "bool", "Reflect on a schedule (dna.auto_reflect_interval_minutes) and after "
      "dna.reflect_trigger new memories.", per_chat=True),
    S("dna.auto_reflect_interval_minutes", 30, "int", "Minutes between scheduled reflections (only of chats "
      "whose memories changed).", min=1, max=100000),
    S("dna.auto_decay", True, "bool", "Decay idle memories on a schedule (dna.auto_decay_interval_hours).",
      per_chat=True),
    S("dna.auto_decay_interval_hours", 24, "int", "Hours between scheduled decay passes.", min=1, max=100000),
    S("dna.evolution_strategy", "balanced", "choice",
      "How readily signals are remembered and memories reinforced or decayed (new/reinforce/decay weights): "
      + ", ".join(f"{name} {w.new_memory_weight:g}/{w.reinforce_weight:g}/{w.decay_weight:g}"
                  for name, w in STRATEGIES.items())
      + ". A signal is remembered when its confidence reaches 1 - new weight.",
      choices=tuple(STRATEGIES), per_chat=True),
    S("dna.signal_confidence_threshold", 0.7, "float",
      "Signals (corrections, preferences, decisions, errors, workflows in user messages) below this confidence "
      "are ignored.", min=0, max=1, per_chat=True),
    S("dna.repair_loop_detection", True, "bool", "Detect repeated corrections/errors of the same thing (the "
      "model keeps making the same mistake) and escalate that memory: pin, lock, raise its importance.",
      per_chat=True),
    S("dna.gep_enabled", True, "bool", "Let genes (trigger -> actions templates) decide what a signal does; off: "
      "every remembered signal becomes a directive memory and corrections fix what they contradict.",
      per_chat=True),
    S("dna.signals", True, "bool", "Turn user signals into directive memories (the 'User directives' section).",
      per_chat=True),
    S("dna.signal_scope", "instructions", "choice", "Where signals are looked for in a user message: "
      "'instructions' = its out-of-character parts ((OOC: ...), ((...)), // ..., [OOC ...], OOC: lines, "
      "（OOC：...）) and plain lines that instruct the story-teller (no dialogue or action, about the replies, "
      "narration, chapters or your character); 'ooc' = the out-of-character parts only; 'message' = also every "
      "in-character sentence, as DNA Memory reads text (most in-character look-alikes then become directives).",
      choices=("instructions", "ooc", "message"), per_chat=True),
    S("dna.capsule", "", "str", "Capsule (named gene bundle with a strategy) used for the chat; empty = every "
      "enabled gene with dna.evolution_strategy.", per_chat=True),
    # DNA hub (optional): share genes and capsules between sidecars, never chat content
    S("network.enabled", False, "bool", "Join a DNA hub: heartbeat with stats, publish and fetch genes/capsules."),
    S("network.hub_url", "", "str", "Base URL of the DNA hub (`stbme hub`), e.g. http://127.0.0.1:8770 "
      "(empty = none).", check=check_http_url),
    S("network.node_id", "", "str", "This sidecar's name on the hub (empty = none)."),
    S("network.token", "", "str", "Token the hub requires (Authorization: Bearer).", secret=True),
    S("network.heartbeat_interval_minutes", 6, "int", "Minutes between heartbeats to the hub.",
      min=1, max=10000),
)

BY_NAME: dict[str, Setting] = {s.name: s for s in SETTINGS}
# Old names still accepted (API, CLI): the value goes to the new setting. Stored rows are moved by a migration.
RENAMED: dict[str, str] = {"extract.llm_every": "extract.every"}


def setting(name: str) -> Setting:
    try:
        return BY_NAME[RENAMED.get(name, name)]
    except KeyError:
        raise BadRequest(f"unknown setting {name!r}", field=name) from None


def defaults() -> dict[str, SettingValue]:
    return {s.name: s.default for s in SETTINGS}


def validate_updates(updates: Any, *, per_chat: bool = False) -> dict[str, SettingValue]:
    """Validate a {name: value} mapping; the first bad key raises. None removes a per-chat override."""
    if not isinstance(updates, dict):
        raise BadRequest("'settings' must be an object of {name: value}", field="settings")
    clean: dict[str, SettingValue] = {}
    for name, value in updates.items():
        s = setting(name)
        if per_chat and not s.per_chat:
            raise BadRequest(f"setting {name!r} cannot be set per chat", field=name)
        clean[s.name] = None if (per_chat and value is None) else s.validate(value)
    return clean


def parse_cli_value(raw: str) -> Any:
    """`--setting NAME VALUE`: VALUE is JSON when it parses as JSON, else a plain string."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return raw


class Settings:
    """Effective settings: defaults, then stored global values, then a chat's overrides.

    The store persists them (table `settings`); this object is the in-memory view, updated only after
    a successful write so readers never see a value that failed to save.
    """

    def __init__(self, global_values: dict | None = None, chat_values: dict[str, dict] | None = None):
        self._global = defaults()
        self._global.update(global_values or {})
        self._chat: dict[str, dict] = {k: dict(v) for k, v in (chat_values or {}).items()}
        self.degraded: list = []  # setting_rules.Degraded: stored values this run sets aside, and why

    def get(self, name: str, chat_id: str | None = None) -> SettingValue:
        if chat_id is not None:
            chat = self._chat.get(chat_id)
            if chat and name in chat:
                return chat[name]
        return self._global[name]

    def __getitem__(self, name: str) -> SettingValue:
        return self._global[name]

    def all(self, chat_id: str | None = None, *, reveal: bool = False) -> dict[str, SettingValue]:
        values = dict(self._global)
        if chat_id is not None:
            values.update(self._chat.get(chat_id, {}))
        if not reveal:
            for s in SETTINGS:
                if s.secret and values.get(s.name):
                    values[s.name] = "***"
        return values

    def overrides(self, chat_id: str) -> dict[str, SettingValue]:
        return dict(self._chat.get(chat_id, {}))

    def apply_global(self, values: dict) -> None:
        self._global.update(values)

    def apply_chat(self, chat_id: str, values: dict) -> None:
        chat = self._chat.setdefault(chat_id, {})
        for k, v in values.items():
            if v is None:
                chat.pop(k, None)
            else:
                chat[k] = v

    def forget_chat(self, chat_id: str) -> None:
        self._chat.pop(chat_id, None)
