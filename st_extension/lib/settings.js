// Extension settings (kept in SillyTavern's `extension_settings.stbme`) and the mapping between the
// sidecar's settings schema (GET /v1/settings/schema) and panel controls (their words: setting_words.js).
// Pure module: no ST imports.

import { CHOICE_LABELS, SETTING_LABELS, helpFor } from './setting_words.js';

export { CHOICE_LABELS, SETTING_LABELS };

export const MODULE_NAME = 'stbme';
export const SETTINGS_VERSION = 2;

/** Settings that live in the browser (everything about memory itself lives in the sidecar). */
export const DEFAULTS = Object.freeze({
    version: SETTINGS_VERSION,
    enabled: true,
    sidecarUrl: 'http://127.0.0.1:8765',
    /** 'auto': direct, falling back to the proxy plugin; 'direct'; 'proxy': through ST's server plugin */
    connection: 'auto',
    apiToken: '',
    /** Deadline for recall inside the generate interceptor; ST waits for the interceptor forever. */
    recallTimeoutMs: 4000,
    /** Deadline for the sync that runs before recall so the sidecar has the latest messages. */
    syncTimeoutMs: 1500,
    /** Deadline for other calls (settings, browser, slash commands). */
    requestTimeoutMs: 15000,
    /** Debounce of chat events before a sync. */
    syncDebounceMs: 600,
    /** Recent chat messages sent with the recall query. */
    recentMessages: 4,
    /** Include the memory block in the World Info scan (setExtensionPrompt's `scan`). */
    worldInfoScan: false,
    /** Ask before deleting a deleted chat's memories. */
    confirmChatDelete: true,
    /** Live channel (WebSocket) for progress and notices. */
    liveChannel: true,
    /** A marker on each remembered message in the chat (a click shows its memories). */
    chatMarkers: true,
});

/** Keys renamed across versions: old -> new. */
const RENAMED = Object.freeze({
    sidecar_url: 'sidecarUrl',
    url: 'sidecarUrl',
    timeout: 'recallTimeoutMs',
    timeoutMs: 'recallTimeoutMs',
    token: 'apiToken',
    use_proxy: 'connection',
});

const CONNECTIONS = ['auto', 'direct', 'proxy'];

/**
 * Fill missing keys from DEFAULTS and migrate renamed or retyped ones, in place.
 * @param {Record<string, any>} extensionSettings SillyTavern's `extension_settings` object
 * @returns {typeof DEFAULTS} the (mutable) settings object stored under MODULE_NAME
 */
export function getSettings(extensionSettings) {
    if (!extensionSettings[MODULE_NAME] || typeof extensionSettings[MODULE_NAME] !== 'object') {
        extensionSettings[MODULE_NAME] = structuredClone(DEFAULTS);
    }
    const s = extensionSettings[MODULE_NAME];
    for (const [oldKey, newKey] of Object.entries(RENAMED)) {
        if (Object.hasOwn(s, oldKey)) {
            if (!Object.hasOwn(s, newKey)) {
                s[newKey] = oldKey === 'use_proxy' ? (s[oldKey] ? 'proxy' : 'auto') : s[oldKey];
            }
            delete s[oldKey];
        }
    }
    for (const [key, value] of Object.entries(DEFAULTS)) {
        if (!Object.hasOwn(s, key) || typeof s[key] !== typeof value) s[key] = structuredClone(value);
    }
    if (!CONNECTIONS.includes(s.connection)) s.connection = DEFAULTS.connection;
    s.sidecarUrl = normalizeUrl(s.sidecarUrl) || DEFAULTS.sidecarUrl;
    for (const key of ['recallTimeoutMs', 'syncTimeoutMs', 'requestTimeoutMs', 'syncDebounceMs', 'recentMessages']) {
        if (!Number.isFinite(s[key]) || s[key] < 0) s[key] = DEFAULTS[key];
    }
    s.version = SETTINGS_VERSION;
    return s;
}

/**
 * Trim a base URL and drop trailing slashes; '' when it is not an http(s) URL.
 * @param {string} url
 */
export function normalizeUrl(url) {
    const text = String(url ?? '').trim().replace(/\/+$/, '');
    if (!/^https?:\/\/[^\s/]+/i.test(text)) return '';
    return text;
}

/** SillyTavern's enums (public/script.js `extension_prompt_types`, `extension_prompt_roles`). */
export const PROMPT_TYPES = Object.freeze({ NONE: -1, IN_PROMPT: 0, IN_CHAT: 1, BEFORE_PROMPT: 2 });
export const PROMPT_ROLES = Object.freeze({ SYSTEM: 0, USER: 1, ASSISTANT: 2 });

const POSITION_BY_NAME = Object.freeze({ in_prompt: 'IN_PROMPT', in_chat: 'IN_CHAT', before_prompt: 'BEFORE_PROMPT' });
const ROLE_BY_NAME = Object.freeze({ system: 'SYSTEM', user: 'USER', assistant: 'ASSISTANT' });

/**
 * The `setExtensionPrompt` position, depth and role for the sidecar's effective `inject.*` settings.
 * @param {Record<string, any>} effective sidecar settings (GET /v1/chats/{id}/settings -> settings)
 * @param {{types?: Record<string, number>, roles?: Record<string, number>}} [enums] ST's enums when exposed
 * @returns {{position: number, depth: number, role: number}}
 */
export function injectionArgs(effective, { types = PROMPT_TYPES, roles = PROMPT_ROLES } = {}) {
    const position = types[POSITION_BY_NAME[effective?.['inject.position']] ?? 'IN_CHAT'] ?? PROMPT_TYPES.IN_CHAT;
    const rawDepth = Number(effective?.['inject.depth']);
    const depth = Number.isInteger(rawDepth) && rawDepth >= 0 ? rawDepth : 4;
    const role = roles[ROLE_BY_NAME[effective?.['inject.role']] ?? 'SYSTEM'] ?? PROMPT_ROLES.SYSTEM;
    return { position, depth, role };
}

/** Display order and titles of the sidecar's setting groups; unknown groups follow, alphabetically. */
export const GROUP_TITLES = Object.freeze({
    inject: 'Injection',
    recall: 'Recall',
    extract: 'Extraction',
    llm: 'Memory LLM',
    embed: 'Embeddings',
    strategy: 'Strategy',
    dedupe: 'Duplicates',
    evolve: 'Evolution (A-MEM)',
    maintain: 'Summaries and upkeep',
    dna: 'DNA memory',
    features: 'Features',
    prompts: 'Prompts',
    index: 'Index',
    network: 'DNA hub',
    server: 'Server',
});

/**
 * The sidecar settings shown before "Advanced", in this order: what a roleplayer sets on the first day.
 * Everything else (and any setting a newer sidecar adds) goes under "Advanced", by group.
 */
export const BASIC_SETTINGS = Object.freeze([
    'recall.enabled', 'recall.budget_tokens', 'recall.max_memories',
    'inject.position', 'inject.depth', 'inject.role',
    'extract.enabled',
    'llm.mode', 'llm.url', 'llm.key', 'llm.model', 'extract.every',
]);

/**
 * 'before_prompt' -> 'Before prompt'.
 * @param {string} value
 */
export function humanize(value) {
    return titleCase(String(value).replace(/[_.]+/g, ' ').trim());
}

/**
 * Split the schema into the basic settings (in BASIC_SETTINGS order) and the rest, grouped.
 * @param {object[]} schema `settings` of GET /v1/settings/schema
 * @param {readonly string[]} [basic] names shown first
 * @returns {{basic: object[], advanced: {group: string, title: string, controls: object[]}[]}}
 */
export function splitBasicAdvanced(schema, basic = BASIC_SETTINGS) {
    const list = Array.isArray(schema) ? schema.filter(def => def && typeof def.name === 'string') : [];
    const byName = new Map(list.map(def => [def.name, def]));
    return {
        basic: basic.filter(name => byName.has(name)).map(name => controlFor(byName.get(name))),
        advanced: schemaToGroups(list.filter(def => !basic.includes(def.name))),
    };
}

/**
 * Turn the sidecar's schema into control descriptors grouped for the panel. Unknown types fall back to
 * a text field so a newer sidecar never breaks the panel.
 * @param {object[]} schema `settings` of GET /v1/settings/schema
 * @returns {{group: string, title: string, controls: object[]}[]}
 */
export function schemaToGroups(schema) {
    const groups = new Map();
    for (const def of Array.isArray(schema) ? schema : []) {
        if (!def || typeof def.name !== 'string') continue;
        const group = def.group || def.name.split('.')[0];
        if (!groups.has(group)) groups.set(group, []);
        groups.get(group).push(controlFor(def));
    }
    const order = Object.keys(GROUP_TITLES);
    return [...groups.entries()]
        .sort(([a], [b]) => {
            const ia = order.indexOf(a), ib = order.indexOf(b);
            if (ia !== -1 || ib !== -1) return (ia === -1 ? 999 : ia) - (ib === -1 ? 999 : ib);
            return a.localeCompare(b);
        })
        .map(([group, controls]) => ({ group, title: GROUP_TITLES[group] ?? titleCase(group), controls }));
}

/**
 * A control descriptor for one schema entry.
 * @param {object} def
 */
export function controlFor(def) {
    const base = {
        name: def.name,
        label: labelFor(def.name),
        help: helpFor(def.name, def.help),
        type: def.type,
        perChat: !!def.per_chat,
        secret: !!def.secret,
        restart: !!def.restart,
        default: def.default,
    };
    switch (def.type) {
        case 'bool':
            return { ...base, input: 'checkbox' };
        case 'int':
        case 'float': {
            const step = def.type === 'int' ? 1 : stepFor(def.min, def.max);
            return { ...base, input: 'number', min: def.min ?? null, max: def.max ?? null, step };
        }
        case 'choice': {
            const choices = Array.isArray(def.choices) ? def.choices.map(String) : [];
            const words = CHOICE_LABELS[def.name] ?? {};
            return { ...base, input: 'select', choices, choiceLabels: choices.map(c => words[c] ?? humanize(c)) };
        }
        case 'list':
            return { ...base, input: 'textarea' };
        case 'str':
            return { ...base, input: def.secret ? 'password' : 'text' };
        default:
            return { ...base, input: 'text' };
    }
}

function stepFor(min, max) {
    if (typeof min === 'number' && typeof max === 'number' && max - min <= 1) return 0.01;
    return 0.05;
}

/**
 * A setting's label: its words from SETTING_LABELS, else 'recall.min_similarity' -> 'Min similarity'.
 * @param {string} name
 */
export function labelFor(name) {
    if (Object.hasOwn(SETTING_LABELS, name)) return SETTING_LABELS[name];
    const last = String(name).split('.').pop() ?? '';
    return titleCase(last.replace(/_/g, ' '));
}

function titleCase(text) {
    return text ? text[0].toUpperCase() + text.slice(1) : text;
}

/**
 * Read a control's raw DOM value as the setting's type. Server validation is the authority (ranges,
 * choices); this only turns text into JSON and catches what cannot be sent at all.
 * @param {object} control a `controlFor` descriptor
 * @param {string|boolean} raw input value (`checked` for checkboxes)
 * @returns {{value: any} | {error: string}}
 */
export function parseControlValue(control, raw) {
    switch (control.type) {
        case 'bool':
            return { value: raw === true || raw === 'true' };
        case 'int': {
            const text = String(raw).trim();
            if (!/^[-+]?\d+$/.test(text)) return { error: 'Enter a whole number.' };
            return { value: Number.parseInt(text, 10) };
        }
        case 'float': {
            const text = String(raw).trim();
            const value = Number(text);
            if (text === '' || !Number.isFinite(value)) return { error: 'Enter a number.' };
            return { value };
        }
        case 'list':
            return {
                value: String(raw).split(/[\n,]/).map(x => x.trim()).filter(Boolean),
            };
        default:
            return { value: String(raw) };
    }
}

/**
 * A setting's value as shown in its control.
 * @param {object} control
 * @param {any} value
 * @returns {string|boolean}
 */
export function formatControlValue(control, value) {
    if (control.type === 'bool') return !!value;
    if (control.type === 'list') return Array.isArray(value) ? value.join('\n') : '';
    if (control.secret && value === '***') return '';
    return value == null ? '' : String(value);
}

/**
 * The recall request body for a generation: the user's new input (the newest user message) and the
 * messages before it, newest last.
 * @param {object[]} chat the interceptor's chat (ST's coreChat, system messages already removed)
 * @param {{recentMessages?: number, budgetTokens?: number|null, maxMemories?: number|null}} [options]
 * @returns {{query: string, recent: object[], budget_tokens?: number, max_memories?: number}}
 */
export function buildRecallRequest(chat, { recentMessages = 4, budgetTokens = null, maxMemories = null } = {}) {
    const messages = Array.isArray(chat) ? chat.filter(m => m && !m.is_system) : [];
    let queryIndex = -1;
    for (let i = messages.length - 1; i >= 0; i--) {
        if (messages[i].is_user) {
            queryIndex = i;
            break;
        }
    }
    const query = queryIndex >= 0 ? String(messages[queryIndex].mes ?? '') : '';
    // Recent turns: what precedes the query, plus anything after it (a continue or swipe context).
    const before = messages.slice(Math.max(0, (queryIndex >= 0 ? queryIndex : messages.length) - recentMessages),
        queryIndex >= 0 ? queryIndex : messages.length);
    const after = queryIndex >= 0 ? messages.slice(queryIndex + 1) : [];
    const recent = [...before, ...after].slice(-Math.max(0, recentMessages)).map(m => ({
        role: m.is_user ? 'user' : 'assistant',
        name: typeof m.name === 'string' ? m.name : '',
        text: String(m.mes ?? ''),
    }));
    const body = { query, recent: recentMessages > 0 ? recent : [] };
    if (Number.isInteger(budgetTokens) && budgetTokens > 0) body.budget_tokens = budgetTokens;
    if (Number.isInteger(maxMemories) && maxMemories > 0) body.max_memories = maxMemories;
    return body;
}
