// The sidecar's settings in a roleplayer's words, for the panel: labels, help, the words for choices, and
// when a setting applies at all (a field that does nothing with the other values is not shown). The
// sidecar's own help (GET /v1/settings/schema) is for operators and docs/settings.md; it is shown for a
// setting without panel words here. Pure module: no ST, no DOM.

/** Labels where the last part of the name says too little on its own. */
export const SETTING_LABELS = Object.freeze({
    'recall.enabled': 'Recall memories before each reply',
    'recall.budget_tokens': 'Memory block size (tokens)',
    'recall.max_memories': 'Most memories in the block',
    'inject.position': 'Where the block goes',
    'inject.depth': 'Depth (messages from the end)',
    'inject.role': 'Role of the block',
    'extract.enabled': 'Make memories from new messages',
    'extract.every': 'Memory LLM reads every N replies',
    'llm.mode': 'Memory LLM',
    'llm.url': 'LLM API URL',
    'llm.key': 'LLM API key',
    'llm.model': 'LLM model',
    'embed.provider': 'Embedding model',
    'embed.openai_url': 'Embeddings API URL',
    'embed.openai_key': 'Embeddings API key',
    'embed.openai_model': 'Embeddings model name',
    'server.cors_origins': 'SillyTavern addresses allowed',
    'server.extra_cors_origins': 'More SillyTavern addresses allowed',
    'recall.in_prompt_tokens': 'Greeting counts as in the prompt up to (tokens)',
    'index.m': 'Index links per memory',
    'index.ef_construction': 'Index build effort',
    'index.ef_search': 'Index search effort',
    'evolve.enabled': 'Let new memories update old ones',
    'extract.smart_trigger': 'Read early on a plot turn',
});

/**
 * Help in words (no setting names, no quoted values, no ranking jargon) where the sidecar's help is written
 * for operators, or where it would only repeat the label.
 */
export const SETTING_HELP = Object.freeze({
    'recall.enabled': 'Before each reply the sidecar looks up what matters in this chat and SillyTavern adds it to the prompt.',
    'recall.budget_tokens': 'How much of the prompt the memories may take: more recalls more, but leaves less room for the chat itself.',
    'recall.max_memories': 'Recalled memories at most; pinned ones, rules, the story synopsis and your directives come on top, within the size.',
    'inject.position': 'In the chat: among the last messages, where the model pays most attention. Before or after the story string: with the character card.',
    'inject.depth': '0 puts the block after the last message, 4 before the last four.',
    'inject.role': 'Who the block seems to come from. System suits most models.',
    'extract.enabled': 'Off: new messages are kept but nothing new is remembered; recall goes on with what is there.',
    'extract.every': '1 = after every reply (the most calls). Every message is still searchable at once, and a plot turn is read early.',
    'llm.mode': 'None: memories from the words of each message, no LLM needed. With an API or your SillyTavern connection, an LLM also notes characters, places, rules and summaries.',
    'llm.url': 'Where the API answers, for example https://api.openai.com/v1, or http://127.0.0.1:11434/v1 for Ollama.',
    'llm.key': 'Leave empty for a local server.',
    'llm.model': 'For example gpt-4o-mini or deepseek-chat.',
    'llm.json_retries': 'How often an answer in the wrong format is sent back with a reminder; reading new messages gets one try more.',
    'llm.relay_timeout_s': 'Longest wait for SillyTavern to answer one memory task, in seconds.',
    'embed.provider': 'The bundled model works offline. An OpenAI-compatible API (OpenAI, Ollama, LM Studio) can be used instead; a change re-embeds every memory in the background.',
    'server.cors_origins': 'The addresses you open SillyTavern at, such as http://127.0.0.1:8000. A web page at any other address cannot use the sidecar.',
    'server.extra_cors_origins': 'For example http://192.168.1.10:8000 when you open SillyTavern from another device; the addresses above stay allowed.',
    'index.m': 'Links per memory in a new vector index: more finds more, in a bigger index.',
    'index.ef_construction': 'Effort spent building a new vector index.',
    'index.ef_search': 'Effort per search of the vector index: more finds more, more slowly.',
    'extract.smart_trigger': 'The memory LLM reads the new messages at once when they look like a plot turn (keywords, your patterns, names).',
    'extract.trigger_patterns': 'Your own plot-turn patterns: regular expressions, one per line or comma-separated, case-insensitive.',
    'dedupe.threshold': 'How similar (0 to 1) a new memory must be to an old one to be checked as a possible duplicate.',
    'evolve.enabled': 'Each new memory re-reads the old memories closest to it, and links or updates them.',
    'evolve.mode': 'With the reading of new messages: the same LLM call does it, at no extra cost. Separately: one more call per batch.',
    'evolve.min_similarity': 'Old memories less similar (0 to 1) than this to the new one are not re-read.',
    'maintain.summary_every': 'A small summary of the recent story after every N readings by the memory LLM (0 = off); summaries roll up in levels.',
    'dna.max_long_term': 'Long-term memories at most: beyond it the weakest of those idle longer than the decay days are archived.',
    'dna.embedding_model': 'Kept so DNA Memory configs load; it has no effect (the sidecar uses its own embedding model).',
    'dna.auto_reflect': 'Reflect on a schedule, and after the number of new memories set for it.',
    'dna.auto_decay': 'Let idle memories fade on a schedule.',
    'dna.signal_scope': 'Where your instructions to the story-teller are looked for: the out-of-character (OOC) parts and commands, those parts only, or every sentence.',
    'prompts.evolve': 'Your own instructions for letting new memories update old ones (empty: the built-in ones).',
    'dna.capsule': 'A named set of directive rules for this chat (empty: every enabled rule, with the strategy above).',
});

/** Words for the values of choice settings; a value not listed gets `humanize(value)`. */
export const CHOICE_LABELS = Object.freeze({
    'inject.position': { in_chat: 'In the chat, at a depth', in_prompt: 'After the story string', before_prompt: 'Before the story string' },
    'inject.role': { system: 'System', user: 'User', assistant: 'Assistant' },
    'llm.mode': { none: 'None (no LLM)', openai: 'OpenAI-compatible API', relay: 'My SillyTavern connection' },
    'embed.provider': { local: 'Bundled model (offline)', openai: 'OpenAI-compatible API' },
    'recall.language': { auto: 'Same as the chat', en: 'English', zh: 'Chinese' },
    'evolve.mode': { with_extraction: 'With the reading of new messages', separate: 'Separately' },
    'dna.evolution_strategy': { balanced: 'Balanced', aggressive: 'Aggressive (remember more)', conservative: 'Conservative (remember less)', cleanup: 'Clean-up (forget faster)' },
    'dna.signal_scope': { instructions: 'OOC parts and commands', ooc: 'OOC parts only', message: 'Every sentence' },
});

const llmOn = v => v['llm.mode'] === 'openai' || v['llm.mode'] === 'relay';
const api = v => v['llm.mode'] === 'openai';
const embedApi = v => v['embed.provider'] === 'openai';

/**
 * When a setting applies, from the values shown with it; a setting not listed always applies.
 * @type {Readonly<Record<string, (values: Record<string, any>) => boolean>>}
 */
export const APPLIES_WHEN = Object.freeze({
    'inject.depth': v => v['inject.position'] === 'in_chat',
    'inject.role': v => v['inject.position'] === 'in_chat',
    'llm.url': api,
    'llm.key': api,
    'llm.model': api,
    'llm.temperature': api,
    'llm.timeout_s': api,
    'llm.concurrency': api,
    'llm.retries': api,
    'llm.relay_timeout_s': v => v['llm.mode'] === 'relay',
    'llm.max_tokens': llmOn,
    'llm.json_retries': llmOn,
    'llm.degrade_when_down': llmOn,
    'llm.redo_degraded_after_s': v => llmOn(v) && v['llm.degrade_when_down'] !== false,
    'embed.openai_url': embedApi,
    'embed.openai_key': embedApi,
    'embed.openai_model': embedApi,
    'embed.timeout_s': embedApi,
    'embed.retries': embedApi,
    'extract.every': llmOn,
    'extract.context_turns': llmOn,
    'extract.existing_memories': llmOn,
    'extract.exclude_tags': llmOn,
    'extract.smart_trigger': llmOn,
    'extract.trigger_patterns': v => llmOn(v) && v['extract.smart_trigger'] !== false,
    'extract.smart_threshold': v => llmOn(v) && v['extract.smart_trigger'] !== false,
    'dedupe.enabled': llmOn,
    'dedupe.threshold': v => llmOn(v) && v['dedupe.enabled'] !== false,
    'dedupe.neighbors': v => llmOn(v) && v['dedupe.enabled'] !== false,
    'evolve.enabled': llmOn,
    'evolve.mode': v => llmOn(v) && v['evolve.enabled'] !== false,
    'evolve.neighbors': v => llmOn(v) && v['evolve.enabled'] !== false && v['evolve.mode'] === 'separate',
    'evolve.min_similarity': v => llmOn(v) && v['evolve.enabled'] !== false && v['evolve.mode'] === 'separate',
    'maintain.summary_every': llmOn,
    'maintain.summary_fan_in': v => llmOn(v) && Number(v['maintain.summary_every']) > 0,
    'maintain.synopsis_every': llmOn,
    'maintain.reflect_every': llmOn,
    'maintain.compress_every': llmOn,
    'prompts.extract': llmOn,
    'prompts.dedupe': llmOn,
    'prompts.evolve': llmOn,
    'prompts.summary': llmOn,
    'prompts.rollup': llmOn,
    'prompts.synopsis': llmOn,
    'prompts.reflect': llmOn,
    'prompts.compress': llmOn,
    'prompts.rerank': v => llmOn(v) && v['recall.rerank'] === true,
    'recall.rerank': llmOn,
    'recall.rerank_pool': v => llmOn(v) && v['recall.rerank'] === true,
    'recall.rerank_timeout_s': v => llmOn(v) && v['recall.rerank'] === true,
    'dna.auto_reflect_interval_minutes': v => v['dna.auto_reflect'] !== false,
    'dna.auto_decay_interval_hours': v => v['dna.auto_decay'] !== false,
    'dna.signal_scope': v => v['dna.signals'] !== false,
    'dna.signal_confidence_threshold': v => v['dna.signals'] !== false,
    'network.hub_url': v => v['network.enabled'] === true,
    'network.node_id': v => v['network.enabled'] === true,
    'network.token': v => v['network.enabled'] === true,
    'network.heartbeat_interval_minutes': v => v['network.enabled'] === true,
});

/**
 * Does a setting do anything with these values? (Values not loaded yet: it does.)
 * @param {string} name
 * @param {Record<string, any> | null | undefined} values the effective values shown in the panel
 */
export function applies(name, values) {
    const rule = APPLIES_WHEN[name];
    if (!rule || !values || typeof values !== 'object') return true;
    return !!rule(values);
}

/**
 * The help shown for a setting: the panel's words, else the sidecar's.
 * @param {string} name
 * @param {string} [schemaHelp]
 */
export function helpFor(name, schemaHelp = '') {
    return Object.hasOwn(SETTING_HELP, name) ? SETTING_HELP[name] : String(schemaHelp ?? '');
}

const STOP_WORDS = new Set(['a', 'an', 'the', 'of', 'to', 'in', 'on', 'for', 'and', 'or', 'is', 'are', 'be', 'by',
    'with', 'at', 'each', 'every', 'this', 'that', 'it', 'its', 'from', 'as', 'n']);
const contentWords = text => String(text ?? '').toLowerCase().match(/[\p{L}\p{N}]+/gu)?.filter(w => !STOP_WORDS.has(w)) ?? [];
const stem = word => word.replace(/(ies|es|s|ed|ing)$/, '');

/**
 * True when a help text tells the reader something its label does not: its first sentence brings at
 * least three words of its own ("Recall memories before each reply: Return memories before each
 * generation." brings two).
 * @param {string} label
 * @param {string} help
 */
export function helpSaysMore(label, help) {
    const known = new Set(contentWords(label).map(stem));
    const first = String(help ?? '').split(/(?<=[.!?])\s/)[0];
    return contentWords(first).filter(w => !known.has(stem(w))).length >= 3;
}

/** Words a roleplayer should not need: setting names, quoted raw values, ranking and index jargon. */
export const JARGON = /'[a-z_]+'|\b(?:server|embed|extract|recall|inject|index|llm|dedupe|evolve|maintain|prompts|dna|network)\.[a-z_]+\b|\b(?:BM25|cosine|reciprocal|RRF|HNSW|e5|A-MEM|RE2)\b/i;
