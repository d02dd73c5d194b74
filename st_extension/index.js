// ST-BME Sidecar: long-term memory for SillyTavern chats. This is the thin browser side: it forwards the
// chat to the sidecar (sync), injects the recalled memory block before each generation, and renders the
// settings panel. All memory logic lives in the sidecar (docs/api.md).
//
// SillyTavern APIs are taken from `SillyTavern.getContext()` (public/script.js `getContext`) so the
// extension does not depend on ST's internal module paths. Pure logic lives in ./lib and is unit-tested.

import { ApiError, SidecarClient } from './lib/client.js';
import { OutageNotifier, adviceFor, withDeadline } from './lib/failopen.js';
import { LiveChannel } from './lib/live.js';
import { LongPollChannel } from './lib/longpoll.js';
import { runRelayRequest } from './lib/relay.js';
import {
    DEFAULTS, MODULE_NAME, PROMPT_ROLES, PROMPT_TYPES, buildRecallRequest, formatControlValue, getSettings,
    injectionArgs, normalizeUrl, parseControlValue, schemaToGroups,
} from './lib/settings.js';
import { ChatSyncer, DEFAULT_MAX_CHUNK } from './lib/sync.js';

const LOG = 'ST-BME:';
const VERSION = '0.1.0';
/** Key of our slot in ST's `extension_prompts`. */
export const PROMPT_KEY = 'stbme_memory';
/** Name of the generate interceptor (manifest.json `generate_interceptor`). */
const INTERCEPTOR = 'stbme_generateInterceptor';
const TOAST_TITLE = 'ST-BME memory';
const HEALTH_EVERY_MS = 15000;
const PROXY_POLL_MS = 5000;
/** Seconds one long-poll may wait at the sidecar (the proxy plugin allows 120 s by default). */
const LONG_POLL_S = 20;
const BROWSER_PAGE = 20;

/** The folder ST serves us from, e.g. /scripts/extensions/third-party/st-bme-sidecar/ */
const BASE_URL = new URL('.', import.meta.url);
/** `renderExtensionTemplateAsync` wants the path below /scripts/extensions/, e.g. third-party/st-bme-sidecar */
const EXTENSION_NAME = (() => {
    const m = decodeURIComponent(BASE_URL.pathname).match(/\/scripts\/extensions\/(.+?)\/?$/);
    return m ? m[1] : 'third-party/st-bme-sidecar';
})();
/** ST's web root (where script.js is), from our own URL, so a path prefix in front of ST is kept. */
const ST_ROOT = (() => {
    const m = BASE_URL.pathname.match(/^(.*?)\/scripts\/extensions\//);
    return new URL(`${m ? m[1] : ''}/`, BASE_URL);
})();

const state = {
    ready: false,
    /** @type {ReturnType<typeof getSettings>} */
    settings: null,
    /** @type {SidecarClient} */
    client: null,
    /** @type {ChatSyncer} */
    syncer: null,
    /** @type {LongPollChannel} long-poll form of the live channel, through the proxy */
    longPoll: null,
    /** @type {LiveChannel} */
    live: null,
    outage: new OutageNotifier(),
    chatId: null,
    /** Effective sidecar settings of the current chat: {chatId, settings, overrides} */
    chatSettings: null,
    globalSettings: null,
    schema: null,
    scope: 'global',
    health: null,
    connection: 'unknown',
    wsState: 'closed',
    progress: '',
    syncTimer: null,
    syncing: null,
    syncAgain: false,
    forceNext: false,
    lastSync: null,
    lastInjection: null,
    healthTimer: null,
    pollTimer: null,
    browser: { offset: 0, q: '', type: '', archived: false, total: 0 },
};

// --------------------------------------------------------------------------------------------------
// SillyTavern access

function ctx() {
    return globalThis.SillyTavern.getContext();
}

/** @returns {string|null} */
function currentChatId() {
    const c = ctx();
    const id = typeof c.getCurrentChatId === 'function' ? c.getCurrentChatId() : c.chatId;
    return id === undefined || id === null || id === '' ? null : String(id);
}

function eventTypes() {
    const c = ctx();
    return c.eventTypes ?? c.event_types;
}

/** ST's enums when the context exposes them (newer ST), else the same values copied from public/script.js. */
function promptEnums() {
    const c = ctx();
    return {
        types: c.extension_prompt_types ?? c.extensionPromptTypes ?? PROMPT_TYPES,
        roles: c.extension_prompt_roles ?? c.extensionPromptRoles ?? PROMPT_ROLES,
    };
}

function toast(level, message, options = {}) {
    const t = globalThis.toastr;
    if (t && typeof t[level] === 'function') t[level](message, TOAST_TITLE, { preventDuplicates: true, ...options });
    else console.log(LOG, level, message);
}

function saveSettings() {
    ctx().saveSettingsDebounced?.();
}

/** Clear our prompt slot (an empty value is skipped by ST's getExtensionPrompt). */
function clearSlot() {
    const { types, roles } = promptEnums();
    try {
        ctx().setExtensionPrompt(PROMPT_KEY, '', types.IN_CHAT, 0, false, roles.SYSTEM);
    } catch (error) {
        console.error(LOG, 'cannot clear the prompt slot', error);
    }
}

// --------------------------------------------------------------------------------------------------
// Client, connection state

function makeClient() {
    const s = state.settings;
    state.client = new SidecarClient({
        baseUrl: s.sidecarUrl,
        mode: s.connection,
        token: s.apiToken,
        timeoutMs: s.requestTimeoutMs,
        proxyHeaders: () => {
            const headers = ctx().getRequestHeaders?.() ?? {};
            return { ...headers };
        },
    });
    if (state.syncer) state.syncer.forgetAcknowledged();
    state.syncer = state.syncer ?? new ChatSyncer({
        send: (chatId, body) => state.client.sync(chatId, body),
        maxChunk: DEFAULT_MAX_CHUNK,
    });
}

function markUp() {
    const wasDown = state.outage.succeeded();
    state.connection = state.client.route === 'proxy' ? 'proxy' : 'ok';
    if (wasDown) toast('success', 'The memory sidecar is reachable again; memory is back on.');
    renderStatus();
}

/**
 * Record a failed call; tells the user once per outage what to do.
 * @param {{reason?: string, error?: any}} failure
 */
function markDown(failure) {
    const reason = failure?.reason ?? 'error';
    const error = failure?.error;
    // An HTTP 4xx other than auth means the sidecar is up; that is a bug or bad input, not an outage.
    if (error instanceof ApiError && error.status >= 400 && error.status < 500 && ![401, 403].includes(error.status) && !error.network) {
        console.warn(LOG, error.message);
        return;
    }
    state.connection = 'down';
    const advice = adviceFor(failure, { url: state.settings.sidecarUrl, mode: state.client?.route });
    if (state.outage.failed(reason)) {
        console.warn(LOG, advice, error);
        toast('warning', advice, { timeOut: 12000 });
    }
    state.lastError = advice;
    renderStatus();
}

async function checkHealth() {
    if (!state.settings.enabled) {
        state.connection = 'off';
        renderStatus();
        return null;
    }
    const result = await withDeadline(signal => state.client.health({ signal }), 5000);
    if (result.ok) {
        const firstContact = !state.health;
        state.health = result.value;
        markUp();
        if (firstContact || !state.schema) loadSidecarSettings().catch(() => {});
        updateLiveChannel();
        return result.value;
    }
    markDown(result);
    return null;
}

function startHealthLoop() {
    clearInterval(state.healthTimer);
    state.healthTimer = setInterval(() => { checkHealth().catch(() => {}); }, HEALTH_EVERY_MS);
    checkHealth().catch(() => {});
}

// --------------------------------------------------------------------------------------------------
// Live channel

function updateLiveChannel() {
    const wantWs = state.settings.enabled && state.settings.liveChannel && state.client.route === 'direct';
    if (!state.live) {
        state.live = new LiveChannel({
            url: () => (state.client.route === 'direct' ? state.client.wsUrl() : null),
            onMessage: onLiveMessage,
            onState: s => { state.wsState = s; renderStatus(); },
            version: VERSION,
        });
    }
    if (wantWs) state.live.start();
    else state.live.stop();

    // Through the proxy there is no WebSocket (ST's plugin router cannot upgrade): the same messages,
    // relay requests included, come by long-poll; the chat status is polled for the progress line.
    const wantPoll = state.settings.enabled && state.settings.liveChannel && state.client.route === 'proxy';
    if (!state.longPoll) {
        state.longPoll = new LongPollChannel({
            post: (path, body, { signal }) => state.client.post(path, body, { signal, timeoutMs: (LONG_POLL_S + 15) * 1000 }),
            onMessage: onLiveMessage,
            onState: s => { state.wsState = s; renderStatus(); },
            waitS: LONG_POLL_S,
        });
    }
    if (wantPoll) state.longPoll.start();
    else state.longPoll.stop();
    if (wantPoll && !state.pollTimer) {
        state.pollTimer = setInterval(() => { pollStatus().catch(() => {}); }, PROXY_POLL_MS);
    } else if (!wantPoll && state.pollTimer) {
        clearInterval(state.pollTimer);
        state.pollTimer = null;
    }
}

/** The live channel in use: the WebSocket on the direct route, the long-poll through the proxy. */
function liveChannel() {
    return state.client?.route === 'proxy' ? state.longPoll : state.live;
}

async function pollStatus() {
    const chatId = currentChatId();
    if (!chatId) return;
    const status = await state.client.status(chatId);
    if (currentChatId() !== chatId) return;
    const pending = status.jobs?.pending ?? 0;
    state.progress = pending ? `Processing memories: up to message ${status.processed_upto} of ${status.messages - 1} (${pending} job(s) pending)` : '';
    if (status.jobs?.last_error && status.jobs?.failed) state.progress = `Last job failed: ${status.jobs.last_error}`;
    renderStatus();
}

/** @param {object} message a server -> client message (docs/api.md, "Live channel") */
function onLiveMessage(message) {
    switch (message.type) {
        case 'hello':
            console.debug(LOG, 'live channel connected to sidecar', message.version);
            break;
        case 'progress': {
            const { task = 'work', done = 0, total = 0, eta_s: eta } = message;
            const pct = total ? Math.round((done / total) * 100) : 0;
            state.progress = done >= total && total ? '' :
                `${task}: ${done}/${total} (${pct}%)${Number.isFinite(eta) && eta > 0 ? `, about ${Math.ceil(eta)} s left` : ''}`;
            renderStatus();
            break;
        }
        case 'notice': {
            const level = ['info', 'warning', 'error'].includes(message.level) ? message.level : 'info';
            if (message.chat_id && message.chat_id !== currentChatId() && level === 'info') break;
            if (level === 'info') {
                state.progress = message.message ?? '';
                renderStatus();
            } else {
                toast(level, message.message ?? 'notice from the memory sidecar');
            }
            break;
        }
        case 'relay_request':
            // llm.mode = relay: run the memory task on the user's current ST connection, answer on the socket.
            relayContext().then(c => runRelayRequest(message, () => c)).then(reply => liveChannel()?.send(reply));
            break;
        case 'job':
            if (message.state === 'failed') toast('error', `Memory processing failed: ${message.error ?? 'unknown error'}. The chat is unaffected.`);
            if (message.chat_id === currentChatId()) {
                state.progress = '';
                renderStatus();
                if (isBrowserOpen()) refreshBrowser().catch(() => {});
            }
            break;
        default:
            break;
    }
}

/**
 * ST's context for the relay. In ST 1.12 `generateRaw` is only an export of script.js, not on getContext()
 * (newer ST has it there); importing script.js by its URL returns the module the page already runs. Never throws.
 */
async function relayContext() {
    const c = ctx();
    if (typeof c.generateRaw === 'function') return c;
    try {
        const { generateRaw } = await import(new URL('script.js', ST_ROOT).href);
        return typeof generateRaw === 'function' ? { ...c, generateRaw } : c;
    } catch (error) {
        console.warn(LOG, 'generateRaw not found', error);
        return c;
    }
}

// --------------------------------------------------------------------------------------------------
// Sync

/**
 * Sync the current chat soon (debounced). Returns at once: ST awaits event listeners in turn.
 * @param {{force?: boolean, delay?: number}} [options]
 */
function scheduleSync({ force = false, delay } = {}) {
    if (!state.ready || !state.settings.enabled) return;
    state.forceNext = state.forceNext || force;
    clearTimeout(state.syncTimer);
    state.syncTimer = setTimeout(() => {
        state.syncTimer = null;
        runSync().catch(() => {});
    }, delay ?? state.settings.syncDebounceMs);
}

/** Run a sync now; joins the one in flight (and runs once more after it if asked meanwhile). */
function runSync() {
    if (state.syncing) {
        state.syncAgain = true;
        return state.syncing;
    }
    state.syncing = (async () => {
        do {
            state.syncAgain = false;
            await syncOnce();
        } while (state.syncAgain);
    })().finally(() => { state.syncing = null; });
    return state.syncing;
}

async function syncOnce() {
    const chatId = currentChatId();
    if (!chatId || !state.settings.enabled) return;
    const force = state.forceNext;
    state.forceNext = false;
    try {
        const result = await state.syncer.sync(chatId, ctx().chat, { force, isCurrent: () => currentChatId() === chatId });
        if (result.status === 'stale') return;
        state.lastSync = { chatId, at: Date.now(), ...(result.response ?? {}) };
        if (result.requests) markUp();
        renderStatus();
    } catch (error) {
        markDown({ reason: 'error', error });
    }
}

/** Sync pending changes before recall, bounded by `syncTimeoutMs`; never throws. */
async function flushSync() {
    clearTimeout(state.syncTimer);
    state.syncTimer = null;
    if (state.outage.down) {
        runSync().catch(() => {});
        return;
    }
    await withDeadline(() => runSync(), state.settings.syncTimeoutMs);
}

// --------------------------------------------------------------------------------------------------
// Event listeners (all return quickly; the network work is scheduled, not awaited)

function onChatEvent(_messageId, type) {
    if (type === 'quiet') return;
    scheduleSync();
}

function onChatChanged() {
    clearSlot();
    const chatId = currentChatId();
    state.chatId = chatId;
    state.lastInjection = null;
    state.chatSettings = null;
    state.progress = '';
    state.browser.offset = 0;
    renderInjection();
    if (!chatId || !state.settings.enabled) {
        renderStatus();
        return;
    }
    loadChatSettings(chatId).catch(() => {});
    scheduleSync({ force: true, delay: 50 });
    if (isBrowserOpen()) refreshBrowser().catch(() => {});
    renderStatus();
}

/** CHAT_DELETED passes the chat file name without .jsonl, GROUP_CHAT_DELETED the group chat id. */
function onChatDeleted(chatId) {
    if (!chatId) return;
    offerDeleteMemories(String(chatId)).catch(error => console.error(LOG, error));
}

async function offerDeleteMemories(chatId) {
    state.syncer.forget(chatId);
    if (!state.settings.enabled) return;
    let status;
    try {
        status = await state.client.status(chatId);
    } catch {
        return; // unknown to the sidecar, or it is down: nothing to offer
    }
    if (!status || (!status.nodes && !status.messages)) return;
    const question = `The chat "${chatId}" was deleted. Also delete its ${status.nodes} memories in the sidecar?`;
    const yes = state.settings.confirmChatDelete ? await confirmPopup(question) : true;
    if (!yes) return;
    try {
        await state.client.deleteChat(chatId);
        toast('info', `Deleted the memories of "${chatId}".`);
    } catch (error) {
        toast('error', `Could not delete the memories: ${error.message}`);
    }
}

async function confirmPopup(text) {
    const c = ctx();
    if (typeof c.callGenericPopup === 'function' && c.POPUP_TYPE) {
        const result = await c.callGenericPopup(text, c.POPUP_TYPE.CONFIRM);
        return result === (c.POPUP_RESULT?.AFFIRMATIVE ?? 1);
    }
    return globalThis.confirm(text);
}

function registerEvents() {
    const c = ctx();
    const et = eventTypes();
    for (const name of ['MESSAGE_SENT', 'MESSAGE_RECEIVED', 'MESSAGE_EDITED', 'MESSAGE_DELETED', 'MESSAGE_SWIPED', 'MESSAGE_UPDATED']) {
        if (et[name]) c.eventSource.on(et[name], onChatEvent);
    }
    c.eventSource.on(et.CHAT_CHANGED, onChatChanged);
    if (et.CHAT_DELETED) c.eventSource.on(et.CHAT_DELETED, onChatDeleted);
    if (et.GROUP_CHAT_DELETED) c.eventSource.on(et.GROUP_CHAT_DELETED, onChatDeleted);
}

// --------------------------------------------------------------------------------------------------
// Recall and injection

async function loadChatSettings(chatId, { render = true } = {}) {
    const data = await state.client.getChatSettings(chatId);
    if (currentChatId() !== chatId) return null;
    state.chatSettings = { chatId, settings: data.settings ?? {}, overrides: data.overrides ?? {} };
    if (render && state.scope === 'chat') renderSidecarValues();
    return state.chatSettings;
}

function effectiveSettings(chatId) {
    if (state.chatSettings?.chatId === chatId) return state.chatSettings.settings;
    return state.globalSettings ?? {};
}

/**
 * The generate interceptor (manifest.json `generate_interceptor`). ST awaits it with no timeout
 * (extensions.js `runGenerationInterceptors`), so everything here is bounded and nothing throws:
 * a slow or dead sidecar means the generation goes on without memory.
 * @param {object[]} chat ST's coreChat (copies of the messages, system ones removed)
 * @param {number} contextSize max context in tokens
 * @param {(immediately: boolean) => void} _abort never called: memory never aborts a generation
 * @param {string} [type] generation type (newer ST passes it; 'quiet' is a background generation)
 */
async function generateInterceptor(chat, contextSize, _abort, type) {
    if (type === 'quiet') return;
    const started = Date.now();
    try {
        clearSlot();
        if (!state.ready) return;
        if (!state.settings.enabled) {
            state.lastInjection = { status: 'off', at: started };
            renderInjection();
            return;
        }
        const chatId = currentChatId();
        if (!chatId) return;

        await flushSync();
        if (currentChatId() !== chatId) return;

        const needSettings = state.chatSettings?.chatId !== chatId;
        const settingsPromise = needSettings
            ? withDeadline(() => loadChatSettings(chatId), state.settings.recallTimeoutMs)
            : Promise.resolve(null);
        const effective = effectiveSettings(chatId);
        let budget = Number.isInteger(effective['recall.budget_tokens']) ? effective['recall.budget_tokens'] : null;
        // Never let memory take more than a quarter of a small model's context.
        if (budget && Number.isFinite(contextSize) && contextSize > 0) budget = Math.max(50, Math.min(budget, Math.floor(contextSize / 4)));
        const body = buildRecallRequest(chat, { recentMessages: state.settings.recentMessages, budgetTokens: budget });
        if (!body.query && body.recent.length) body.query = body.recent[body.recent.length - 1].text;
        if (!body.query.trim()) {
            state.lastInjection = { status: 'empty', at: started, chatId, reason: 'nothing to search for' };
            renderInjection();
            return;
        }

        const timeoutMs = state.outage.down ? Math.min(1000, state.settings.recallTimeoutMs) : state.settings.recallTimeoutMs;
        const [result] = await Promise.all([
            withDeadline(signal => state.client.recall(chatId, body, { signal, timeoutMs: 0 }), timeoutMs),
            settingsPromise,
        ]);
        if (currentChatId() !== chatId) return;
        if (!result.ok) {
            markDown(result);
            state.lastInjection = { status: 'failed', at: started, chatId, reason: adviceFor(result, { url: state.settings.sidecarUrl }), ms: result.ms };
            renderInjection();
            return;
        }
        markUp();
        const recall = result.value;
        const text = typeof recall.text === 'string' ? recall.text : '';
        if (!text.trim()) {
            state.lastInjection = { status: 'empty', at: started, chatId, query: body.query, memories: [], ms: Date.now() - started };
            renderInjection();
            return;
        }
        const args = injectionArgs(effectiveSettings(chatId), promptEnums());
        ctx().setExtensionPrompt(PROMPT_KEY, text, args.position, args.depth, !!state.settings.worldInfoScan, args.role);
        state.lastInjection = {
            status: 'injected', at: started, chatId, query: body.query, text, tokens: recall.tokens,
            memories: Array.isArray(recall.memories) ? recall.memories : [], ms: Date.now() - started,
            took_ms: recall.took_ms, ...args,
        };
        renderInjection();
    } catch (error) {
        console.error(LOG, 'interceptor failed; generating without memory', error);
        clearSlot();
        state.lastInjection = { status: 'failed', at: started, reason: String(error?.message ?? error) };
        renderInjection();
    }
}

globalThis[INTERCEPTOR] = generateInterceptor;

// --------------------------------------------------------------------------------------------------
// Slash commands

async function registerSlashCommands() {
    const c = ctx();
    let { SlashCommandParser, SlashCommand, SlashCommandArgument, SlashCommandNamedArgument, ARGUMENT_TYPE } = c;
    if (SlashCommandParser && (!SlashCommand || !SlashCommandArgument)) {
        // ST 1.12 exposes only the parser on the context; the classes are ES modules next to it.
        try {
            ({ SlashCommand } = await import(new URL('scripts/slash-commands/SlashCommand.js', ST_ROOT).href));
            ({ SlashCommandArgument, SlashCommandNamedArgument, ARGUMENT_TYPE } = await import(new URL('scripts/slash-commands/SlashCommandArgument.js', ST_ROOT).href));
        } catch (error) {
            console.warn(LOG, 'slash command classes not found', error);
        }
    }
    const commands = slashCommands(ARGUMENT_TYPE ?? { STRING: 'string', NUMBER: 'number', BOOLEAN: 'bool' });
    for (const command of commands) {
        try {
            if (SlashCommandParser && SlashCommand && SlashCommandArgument) {
                SlashCommandParser.addCommandObject(SlashCommand.fromProps({
                    name: command.name,
                    aliases: command.aliases,
                    callback: command.callback,
                    helpString: command.helpString,
                    returns: command.returns,
                    namedArgumentList: (command.named ?? []).map(a =>
                        SlashCommandNamedArgument.fromProps({ name: a.name, description: a.description, typeList: [a.type], isRequired: false, defaultValue: a.defaultValue ?? null })),
                    unnamedArgumentList: (command.unnamed ?? []).map(a =>
                        SlashCommandArgument.fromProps({ description: a.description, typeList: [a.type], isRequired: !!a.required })),
                }));
            } else if (typeof c.registerSlashCommand === 'function') {
                c.registerSlashCommand(command.name, command.callback, command.aliases, command.helpString);
            }
        } catch (error) {
            console.error(LOG, `cannot register /${command.name}`, error);
        }
    }
}

function slashCommands(T) {
    return [
        {
            name: 'memory-status',
            aliases: ['stbme-status'],
            helpString: 'Show the ST-BME memory sidecar status for the current chat: connection, messages synced, memories, processing queue and the last injection.',
            returns: 'status text',
            callback: async () => {
                const text = await statusText();
                toast('info', text.replace(/\n/g, '<br>'), { escapeHtml: false, timeOut: 8000 });
                return text;
            },
        },
        {
            name: 'remember',
            aliases: ['stbme-remember'],
            helpString: 'Store a memory for the current chat, e.g. <code>/remember Elena is afraid of deep water</code>. <code>pin=true</code> keeps it in every recall.',
            returns: 'the new memory id',
            named: [{ name: 'pin', description: 'always include this memory', type: T.BOOLEAN, defaultValue: 'false' }],
            unnamed: [{ description: 'what to remember', type: T.STRING, required: true }],
            callback: async (args, value) => {
                const text = String(value ?? '').trim();
                const chatId = currentChatId();
                if (!chatId) return failCommand('Open a chat first.');
                if (!text) return failCommand('Usage: /remember <text>');
                try {
                    const body = { text };
                    if (String(args?.pin) === 'true') body.pinned = true;
                    const res = await state.client.createNode(chatId, body);
                    toast('success', `Remembered: ${text.slice(0, 80)}`);
                    if (isBrowserOpen()) refreshBrowser().catch(() => {});
                    return res.node?.id ?? '';
                } catch (error) {
                    return failCommand(`Could not remember: ${error.message}`);
                }
            },
        },
        {
            name: 'recall',
            aliases: ['stbme-recall'],
            helpString: 'Search the memories of the current chat, e.g. <code>/recall the vault code</code>. Returns the memory block the sidecar would inject.',
            returns: 'memory block text',
            named: [{ name: 'budget', description: 'token budget of the block', type: T.NUMBER }],
            unnamed: [{ description: 'what to search for', type: T.STRING, required: true }],
            callback: async (args, value) => {
                const query = String(value ?? '').trim();
                const chatId = currentChatId();
                if (!chatId) return failCommand('Open a chat first.');
                if (!query) return failCommand('Usage: /recall <query>');
                try {
                    const body = { query };
                    const budget = Number(args?.budget);
                    if (Number.isInteger(budget) && budget > 0) body.budget_tokens = budget;
                    const res = await state.client.recall(chatId, body);
                    return res.text ?? '';
                } catch (error) {
                    return failCommand(`Recall failed: ${error.message}`);
                }
            },
        },
        {
            name: 'memory-used',
            aliases: ['stbme-used'],
            helpString: 'Show the memory block injected into the last generation.',
            returns: 'memory block text',
            callback: async () => {
                openInjectionView();
                return state.lastInjection?.text ?? '';
            },
        },
    ];
}

function failCommand(message) {
    toast('warning', message);
    return '';
}

async function statusText() {
    const chatId = currentChatId();
    const lines = [`Sidecar: ${state.settings.sidecarUrl} (${state.client.route}) — ${connectionLabel()}`];
    if (!state.settings.enabled) lines.push('Memory is turned off in the ST-BME settings.');
    if (!chatId) {
        lines.push('No chat open.');
        return lines.join('\n');
    }
    try {
        const s = await state.client.status(chatId);
        lines.push(`Chat: ${chatId}`);
        lines.push(`Messages synced: ${s.messages}; memories: ${s.nodes}; processed up to message ${s.processed_upto}`);
        lines.push(`Jobs pending: ${s.jobs?.pending ?? 0}, failed: ${s.jobs?.failed ?? 0}${s.jobs?.last_error ? ` (last error: ${s.jobs.last_error})` : ''}`);
        if (s.index) lines.push(`Index: ${s.index.count ?? 'not loaded'}${s.index.count != null ? ' vectors' : ''}, embedder ${s.index.embedder}`);
    } catch (error) {
        lines.push(error.status === 404 ? `Chat ${chatId} is not in the sidecar yet.` : `Status unavailable: ${error.message}`);
    }
    const inj = state.lastInjection;
    if (inj) lines.push(`Last generation: ${inj.status}${inj.memories ? `, ${inj.memories.length} memories` : ''}${inj.tokens ? `, ${inj.tokens} tokens` : ''}`);
    return lines.join('\n');
}

// --------------------------------------------------------------------------------------------------
// DOM helpers

/**
 * Create an element. `text` sets textContent; never pass sidecar data as HTML.
 * @param {string} tag
 * @param {Record<string, any>} [attrs]
 * @param {(Node|string)[]} [children]
 */
function h(tag, attrs = {}, children = []) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs)) {
        if (value === undefined || value === null || value === false) continue;
        if (key === 'text') node.textContent = String(value);
        else if (key === 'class') node.className = value;
        else if (key.startsWith('on') && typeof value === 'function') node.addEventListener(key.slice(2), value);
        else if (value === true) node.setAttribute(key, '');
        else node.setAttribute(key, String(value));
    }
    for (const child of children) if (child !== null && child !== undefined) node.append(child);
    return node;
}

const $id = id => document.getElementById(id);

function connectionLabel() {
    switch (state.connection) {
        case 'ok': return 'connected';
        case 'proxy': return 'connected through the SillyTavern plugin';
        case 'down': return 'unreachable';
        case 'off': return 'memory off';
        default: return 'checking…';
    }
}

// --------------------------------------------------------------------------------------------------
// Settings panel

async function renderPanel() {
    const container = $id('extensions_settings2') ?? $id('extensions_settings');
    if (!container) {
        console.warn(LOG, 'no #extensions_settings2 to render the panel into');
        return;
    }
    let html;
    try {
        html = await ctx().renderExtensionTemplateAsync(EXTENSION_NAME, 'settings');
    } catch {
        html = await (await fetch(new URL('settings.html', BASE_URL))).text();
    }
    const wrapper = document.createElement('div');
    wrapper.innerHTML = html;
    container.append(...wrapper.childNodes);
    bindLocalSettings();
    bindButtons();
    renderStatus();
    renderInjection();
}

/** One binder for every `data-stbme-setting` control: set from settings, write back by input type. */
function bindLocalSettings() {
    for (const input of document.querySelectorAll('[data-stbme-setting]')) {
        const key = input.dataset.stbmeSetting;
        if (!Object.hasOwn(DEFAULTS, key)) continue;
        const value = state.settings[key];
        if (input.type === 'checkbox') input.checked = !!value;
        else input.value = String(value);
        input.addEventListener('change', () => onLocalSettingChanged(input, key));
    }
}

function onLocalSettingChanged(input, key) {
    const s = state.settings;
    const error = input.closest('.stbme_field')?.querySelector('.stbme_field_error');
    if (error) error.textContent = '';
    let value;
    if (input.type === 'checkbox') value = input.checked;
    else if (typeof DEFAULTS[key] === 'number') {
        value = Number(input.value);
        if (!Number.isFinite(value) || value < 0) {
            if (error) error.textContent = 'Enter a positive number.';
            return;
        }
    } else value = input.value;
    if (key === 'sidecarUrl') {
        value = normalizeUrl(value);
        if (!value) {
            if (error) error.textContent = 'Enter an http:// or https:// URL, e.g. http://127.0.0.1:8765';
            return;
        }
        input.value = value;
    }
    s[key] = value;
    saveSettings();
    if (['sidecarUrl', 'connection', 'apiToken', 'requestTimeoutMs'].includes(key)) {
        makeClient();
        state.health = null;
        state.schema = null;
        state.outage.succeeded();
        state.live?.restart();
        if (state.longPoll && !state.longPoll.stopped) state.longPoll.restart();
        checkHealth().catch(() => {});
    }
    if (key === 'enabled') {
        if (!value) {
            clearSlot();
            state.live?.stop();
            state.longPoll?.stop();
            state.connection = 'off';
        } else {
            scheduleSync({ force: true, delay: 50 });
        }
        checkHealth().catch(() => {});
    }
    if (key === 'liveChannel') updateLiveChannel();
    renderStatus();
}

function bindButtons() {
    const on = (id, fn) => $id(id)?.addEventListener('click', event => {
        event.preventDefault();
        Promise.resolve(fn()).catch(error => toast('error', error.message));
    });
    on('stbme_test', async () => {
        const health = await checkHealth();
        if (health) toast('success', `Connected (${state.client.route}). Sidecar ${health.version ?? ''}, embedder ${health.embedder?.id ?? '?'}.`);
    });
    on('stbme_reindex', async () => {
        const chatId = requireChat();
        const res = await state.client.reindex(chatId);
        toast('info', `Rebuilding the index of this chat (job ${res.job_id}). Progress shows below.`);
    });
    on('stbme_export', exportMemories);
    on('stbme_import', () => $id('stbme_import_file')?.click());
    $id('stbme_import_file')?.addEventListener('change', event => {
        importMemories(event.target).catch(error => toast('error', `Import failed: ${error.message}`));
    });
    on('stbme_show_used', () => toggleSection('stbme_injection_view'));
    on('stbme_show_browser', async () => {
        if (toggleSection('stbme_browser')) await refreshBrowser();
    });
    on('stbme_browser_search', async () => {
        state.browser.offset = 0;
        await refreshBrowser();
    });
    $id('stbme_browser_q')?.addEventListener('keydown', event => {
        if (event.key === 'Enter') {
            event.preventDefault();
            state.browser.offset = 0;
            refreshBrowser().catch(error => toast('error', error.message));
        }
    });
    on('stbme_browser_prev', async () => {
        state.browser.offset = Math.max(0, state.browser.offset - BROWSER_PAGE);
        await refreshBrowser();
    });
    on('stbme_browser_next', async () => {
        if (state.browser.offset + BROWSER_PAGE < state.browser.total) state.browser.offset += BROWSER_PAGE;
        await refreshBrowser();
    });
    on('stbme_remember_add', async () => {
        const input = $id('stbme_remember_text');
        const text = input?.value.trim();
        if (!text) return;
        await state.client.createNode(requireChat(), { text });
        input.value = '';
        await refreshBrowser();
    });
    for (const radio of document.querySelectorAll('input[name="stbme_scope"]')) {
        radio.addEventListener('change', () => {
            state.scope = radio.value === 'chat' ? 'chat' : 'global';
            if (state.scope === 'chat' && !currentChatId()) {
                toast('info', 'Open a chat to edit its own settings.');
            }
            const chatId = currentChatId();
            if (state.scope === 'chat' && chatId && state.chatSettings?.chatId !== chatId) {
                loadChatSettings(chatId).catch(error => toast('error', error.message));
            }
            renderSidecarValues();
        });
    }
}

function requireChat() {
    const chatId = currentChatId();
    if (!chatId) throw new Error('Open a chat first.');
    return chatId;
}

function toggleSection(id) {
    const section = $id(id);
    if (!section) return false;
    section.hidden = !section.hidden;
    return !section.hidden;
}

function renderStatus() {
    const dot = $id('stbme_status_dot');
    const text = $id('stbme_status_text');
    if (!dot || !text) return;
    const cls = { ok: 'ok', proxy: 'proxy', down: 'down', off: 'off' }[state.connection] ?? 'unknown';
    dot.className = `stbme_dot stbme_dot_${cls}`;
    dot.title = connectionLabel();
    const parts = [connectionLabel()];
    const up = state.connection === 'ok' || state.connection === 'proxy';
    if (up && state.health?.version) parts.push(`sidecar ${state.health.version}`);
    if (state.connection === 'ok' && state.settings.liveChannel) parts.push(state.wsState === 'open' ? 'live' : 'live channel reconnecting');
    const chatId = currentChatId();
    if (up && chatId && state.lastSync?.chatId === chatId) {
        parts.push(`synced ${state.lastSync.stored_length ?? '?'} messages, memories up to #${state.lastSync.processed_upto ?? '?'}`);
    }
    text.textContent = parts.join(' · ');
    text.dataset.state = cls;
    const progress = $id('stbme_progress');
    if (progress) {
        progress.textContent = state.connection === 'down' ? (state.lastError ?? '') : state.progress;
        progress.classList.toggle('stbme_error', state.connection === 'down');
    }
}

// ---- sidecar settings (schema-driven)

async function loadSidecarSettings() {
    const [schema, global] = await Promise.all([state.client.schema(), state.client.getSettings()]);
    state.schema = schema.settings ?? [];
    state.globalSettings = global.settings ?? {};
    const serverMax = Number(state.globalSettings['server.max_sync_messages']);
    state.syncer.maxChunk = Number.isInteger(serverMax) && serverMax > 0 ? Math.min(DEFAULT_MAX_CHUNK, serverMax) : DEFAULT_MAX_CHUNK;
    const chatId = currentChatId();
    if (chatId) await loadChatSettings(chatId).catch(() => {});
    renderSidecarSettings();
}

function renderSidecarSettings() {
    const root = $id('stbme_sidecar_settings');
    if (!root || !state.schema) return;
    root.replaceChildren();
    for (const group of schemaToGroups(state.schema)) {
        // <details>, not a nested inline-drawer: ST's drawer toggle slides every .inline-drawer-content
        // inside the clicked drawer (script.js, '.inline-drawer-toggle' click handler), nested ones included.
        const body = h('div', { class: 'stbme_group_body' });
        const drawer = h('details', { class: 'stbme_group', 'data-group': group.group, open: group.group === 'inject' }, [
            h('summary', {}, [h('b', { text: group.title })]),
            body,
        ]);
        for (const control of group.controls) body.append(renderControl(control));
        root.append(drawer);
    }
    renderSidecarValues();
}

function renderControl(control) {
    const id = `stbme_s_${control.name.replace(/[^a-z0-9]+/gi, '_')}`;
    let input;
    if (control.input === 'checkbox') {
        input = h('input', { type: 'checkbox', id });
    } else if (control.input === 'select') {
        input = h('select', { id, class: 'text_pole' }, control.choices.map(choice => h('option', { value: choice, text: choice })));
    } else if (control.input === 'textarea') {
        input = h('textarea', { id, class: 'text_pole textarea_compact', rows: 2, placeholder: 'one per line' });
    } else if (control.input === 'number') {
        input = h('input', { id, type: 'number', class: 'text_pole', min: control.min, max: control.max, step: control.step });
    } else {
        input = h('input', { id, type: control.input === 'password' ? 'password' : 'text', class: 'text_pole', autocomplete: 'off' });
    }
    input.dataset.stbmeServerSetting = control.name;
    const reset = h('span', { class: 'stbme_reset fa-solid fa-rotate-left', title: 'Use the value for all chats', hidden: true, role: 'button' });
    reset.addEventListener('click', () => pushSidecarSetting(control, null, field));
    const range = control.input === 'number' && (control.min !== null || control.max !== null)
        ? ` (${control.min ?? '…'}–${control.max ?? '…'})` : '';
    const label = control.input === 'checkbox'
        ? h('label', { class: 'checkbox_label', for: id }, [input, h('span', { text: control.label })])
        : h('label', { for: id, text: control.label + range });
    const field = h('div', { class: 'stbme_field', 'data-setting': control.name, title: control.help }, [
        h('div', { class: 'stbme_field_head' }, [label, control.perChat ? h('small', { class: 'stbme_badge', text: 'per chat' }) : null, reset]),
        control.input === 'checkbox' ? null : input,
        h('small', { class: 'stbme_help', text: control.help + (control.restart ? ' (takes effect after a restart of the sidecar)' : '') }),
        h('div', { class: 'stbme_field_error', role: 'alert' }),
    ]);
    input.addEventListener('change', () => {
        const raw = control.input === 'checkbox' ? input.checked : input.value;
        if (control.secret && raw === '') return;
        const parsed = parseControlValue(control, raw);
        if ('error' in parsed) {
            field.querySelector('.stbme_field_error').textContent = parsed.error;
            return;
        }
        pushSidecarSetting(control, parsed.value, field).catch(() => {});
    });
    return field;
}

/**
 * Show current values (global or this chat's effective ones) in the schema controls.
 * @param {string} [only] refresh just this setting (after saving it), leaving fields the user may be typing in alone
 */
function renderSidecarValues(only) {
    if (!state.schema) return;
    const chatScope = state.scope === 'chat' && state.chatSettings?.chatId === currentChatId() && currentChatId();
    const values = chatScope ? state.chatSettings.settings : (state.globalSettings ?? {});
    const overrides = chatScope ? state.chatSettings.overrides : {};
    const note = $id('stbme_scope_note');
    if (note) note.textContent = chatScope ? `Editing overrides for this chat only (${currentChatId()}). Settings without "per chat" are global.` : 'Editing settings for all chats.';
    for (const def of state.schema) {
        if (only && def.name !== only) continue;
        const field = document.querySelector(`.stbme_field[data-setting="${CSS.escape(def.name)}"]`);
        if (!field) continue;
        const control = schemaToGroups([def])[0].controls[0];
        const input = field.querySelector('[data-stbme-server-setting]');
        const value = formatControlValue(control, values[def.name]);
        if (input.type === 'checkbox') input.checked = !!value;
        else input.value = value;
        if (control.secret) input.placeholder = values[def.name] === '***' ? 'set (hidden); type to replace' : '';
        input.disabled = !!(chatScope && !def.per_chat);
        field.classList.toggle('stbme_overridden', !!(chatScope && Object.hasOwn(overrides, def.name)));
        field.querySelector('.stbme_reset').hidden = !(chatScope && Object.hasOwn(overrides, def.name));
    }
}

/**
 * Send one setting to the sidecar (global or this chat); the sidecar validates, errors show by the field.
 * @param {object} control
 * @param {any} value null removes this chat's override
 * @param {HTMLElement} field
 */
async function pushSidecarSetting(control, value, field) {
    const error = field.querySelector('.stbme_field_error');
    error.textContent = '';
    field.classList.add('stbme_saving');
    const chatId = currentChatId();
    try {
        if (state.scope === 'chat' && chatId) {
            const res = await state.client.putChatSettings(chatId, { [control.name]: value });
            state.chatSettings = { chatId, settings: res.settings ?? {}, overrides: res.overrides ?? {} };
            if (!res.overrides) await loadChatSettings(chatId, { render: false });
        } else {
            const res = await state.client.putSettings({ [control.name]: value });
            state.globalSettings = res.settings ?? state.globalSettings;
            if (chatId) await loadChatSettings(chatId, { render: false }).catch(() => {});
        }
        field.classList.add('stbme_saved');
        setTimeout(() => field.classList.remove('stbme_saved'), 1200);
    } catch (e) {
        error.textContent = e.field && e.field !== control.name ? `${e.field}: ${e.message}` : e.message;
        throw e;
    } finally {
        field.classList.remove('stbme_saving');
        renderSidecarValues(control.name);
        // renderSidecarValues resets the input to the stored value; keep the rejected input visible.
        if (error.textContent) {
            const input = field.querySelector('[data-stbme-server-setting]');
            if (input && input.type !== 'checkbox' && value !== null) input.value = Array.isArray(value) ? value.join('\n') : String(value);
        }
    }
}

// ---- export / import

async function exportMemories() {
    const chatId = requireChat();
    const data = await state.client.exportChat(chatId);
    const blob = new Blob([JSON.stringify(data, null, 2)], { type: 'application/json' });
    const url = URL.createObjectURL(blob);
    const a = h('a', { href: url, download: `stbme-${chatId.replace(/[^\w.-]+/g, '_')}.json` });
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10000);
    toast('success', `Exported ${data.nodes?.length ?? 0} memories.`);
}

async function importMemories(input) {
    const file = input.files?.[0];
    input.value = '';
    if (!file) return;
    const chatId = requireChat();
    let data;
    try {
        data = JSON.parse(await file.text());
    } catch {
        throw new Error(`${file.name} is not JSON.`);
    }
    const mode = $id('stbme_import_mode')?.value === 'replace' ? 'replace' : 'merge';
    if (mode === 'replace' && !(await confirmPopup('Replace all memories of this chat with the imported ones?'))) return;
    const res = await state.client.importChat(chatId, data, mode);
    const skipped = Array.isArray(res.skipped) ? res.skipped.length : 0;
    toast('success', `Imported ${res.imported?.nodes ?? 0} memories and ${res.imported?.edges ?? 0} links${skipped ? `; skipped ${skipped}` : ''}.`);
    if (isBrowserOpen()) await refreshBrowser();
}

// ---- "memories used" view

function renderInjection() {
    const view = $id('stbme_injection_view');
    if (!view) return;
    const inj = state.lastInjection;
    const summary = $id('stbme_injection_summary');
    const pre = $id('stbme_injection_text');
    const list = $id('stbme_injection_list');
    list.replaceChildren();
    if (!inj) {
        summary.textContent = 'No generation yet in this chat.';
        pre.textContent = '';
        return;
    }
    const when = new Date(inj.at).toLocaleTimeString();
    switch (inj.status) {
        case 'injected':
            summary.textContent = `${when}: ${inj.memories?.length ?? 0} memories, ${inj.tokens ?? '?'} tokens, in ${inj.ms} ms`;
            break;
        case 'empty':
            summary.textContent = `${when}: nothing relevant was found${inj.reason ? ` (${inj.reason})` : ''}.`;
            break;
        case 'failed':
            summary.textContent = `${when}: generated without memory. ${inj.reason ?? ''}`;
            break;
        case 'off':
            summary.textContent = `${when}: memory is turned off.`;
            break;
        default:
            summary.textContent = String(inj.status);
    }
    pre.textContent = inj.text ?? '';
    for (const m of inj.memories ?? []) {
        list.append(h('li', {}, [
            h('span', { class: 'stbme_type', text: m.type ?? '' }),
            h('span', { class: 'stbme_label', text: m.label ?? m.id }),
            h('span', { class: 'stbme_score', text: Number.isFinite(m.score) ? m.score.toFixed(2) : '', title: m.score_parts ? JSON.stringify(m.score_parts) : '' }),
            m.pinned ? h('span', { class: 'fa-solid fa-thumbtack', title: 'pinned' }) : null,
        ]));
    }
}

function openInjectionView() {
    const c = ctx();
    const inj = state.lastInjection;
    if (typeof c.callGenericPopup === 'function' && c.POPUP_TYPE) {
        const content = h('div', { class: 'stbme_popup' }, [
            h('h3', { text: 'Memories used for the last generation' }),
            h('p', { text: $id('stbme_injection_summary')?.textContent ?? (inj ? inj.status : 'No generation yet.') }),
            inj?.text ? h('pre', { class: 'stbme_block', text: inj.text }) : null,
        ]);
        c.callGenericPopup(content, c.POPUP_TYPE.TEXT, '', { wide: true, allowVerticalScrolling: true });
        return;
    }
    const view = $id('stbme_injection_view');
    if (view) {
        view.hidden = false;
        view.scrollIntoView({ block: 'nearest' });
    }
}

function addMenuButton() {
    const menu = $id('extensionsMenu');
    if (!menu || $id('stbme_menu_used')) return;
    const item = h('div', { id: 'stbme_menu_used', class: 'list-group-item flex-container flexGap5 interactable', tabindex: 0, title: 'Show the memories injected into the last generation' }, [
        h('div', { class: 'fa-solid fa-brain extensionsMenuExtensionButton' }),
        h('span', { text: 'Memories used' }),
    ]);
    item.addEventListener('click', openInjectionView);
    menu.append(item);
}

// ---- memory browser

function isBrowserOpen() {
    const browser = $id('stbme_browser');
    return !!browser && !browser.hidden;
}

async function refreshBrowser() {
    const list = $id('stbme_browser_list');
    const info = $id('stbme_browser_info');
    if (!list) return;
    const chatId = currentChatId();
    if (!chatId) {
        list.replaceChildren();
        info.textContent = 'Open a chat to browse its memories.';
        return;
    }
    const b = state.browser;
    b.q = $id('stbme_browser_q')?.value.trim() ?? '';
    b.type = $id('stbme_browser_type')?.value ?? '';
    b.archived = !!$id('stbme_browser_archived')?.checked;
    let res;
    try {
        res = await state.client.nodes(chatId, { offset: b.offset, limit: BROWSER_PAGE, type: b.type, q: b.q, archived: b.archived });
    } catch (error) {
        if (currentChatId() !== chatId) return;
        list.replaceChildren();
        info.textContent = error.status === 404 ? 'No memories for this chat yet.' : `Cannot load memories: ${error.message}`;
        return;
    }
    if (currentChatId() !== chatId) return;
    b.total = res.total ?? 0;
    const nodes = res.nodes ?? [];
    info.textContent = b.total ? `${b.offset + 1}–${b.offset + nodes.length} of ${b.total}` : 'No memories match.';
    list.replaceChildren(...nodes.map(node => renderNode(chatId, node)));
}

function nodeText(node) {
    const f = node.fields ?? {};
    return f.summary ?? f.text ?? f.content ?? f.constraint ?? f.description ?? node.label ?? '';
}

function renderNode(chatId, node) {
    const flags = [node.pinned && 'pinned', node.locked && 'locked', node.archived && 'archived'].filter(Boolean);
    const row = h('li', { class: 'stbme_node', 'data-id': node.id }, [
        h('div', { class: 'stbme_node_head' }, [
            h('span', { class: 'stbme_type', text: node.type }),
            h('span', { class: 'stbme_label', text: node.label || node.id }),
            h('span', { class: 'stbme_flags', text: flags.join(' · ') }),
            h('span', { class: 'stbme_meta', text: `imp ${node.importance ?? '?'}${node.seq_range ? ` · msgs ${node.seq_range[0]}–${node.seq_range[1]}` : ''}` }),
        ]),
        h('div', { class: 'stbme_node_text', text: nodeText(node) }),
    ]);
    const actions = h('div', { class: 'stbme_node_actions' });
    const act = (label, action, title) => h('button', {
        class: 'menu_button stbme_small', text: label, title, 'data-action': action,
        onclick: async () => {
            try {
                await state.client.nodeAction(chatId, node.id, action);
                await refreshBrowser();
            } catch (error) {
                toast('error', `${label} failed: ${error.message}`);
            }
        },
    });
    actions.append(
        h('button', { class: 'menu_button stbme_small', text: 'Edit', 'data-action': 'edit', onclick: () => editNode(chatId, node, row) }),
        node.pinned ? act('Unpin', 'unpin') : act('Pin', 'pin', 'Always include in recall'),
        node.locked ? act('Unlock', 'unlock') : act('Lock', 'lock', 'Protect from edits and evolution'),
        node.archived ? act('Restore', 'restore') : act('Archive', 'archive', 'Hide from recall (can be restored)'),
    );
    row.append(actions);
    return row;
}

function editNode(chatId, node, row) {
    if (row.querySelector('.stbme_editor')) return;
    const fields = node.fields ?? {};
    const inputs = {};
    const editor = h('div', { class: 'stbme_editor' });
    for (const [key, value] of Object.entries(fields)) {
        if (typeof value !== 'string' && typeof value !== 'number') continue;
        inputs[key] = h('textarea', { class: 'text_pole textarea_compact', rows: String(value).length > 80 ? 3 : 1, 'data-field': key });
        inputs[key].value = String(value);
        editor.append(h('label', { text: key }), inputs[key]);
    }
    const importance = h('input', { type: 'number', class: 'text_pole', min: 0, max: 10, step: 1, value: node.importance ?? 5 });
    const error = h('div', { class: 'stbme_field_error', role: 'alert' });
    editor.append(h('label', { text: 'importance (0–10)' }), importance, error);
    const save = async (unlock = false) => {
        const changed = {};
        for (const [key, input] of Object.entries(inputs)) {
            const original = fields[key];
            const value = typeof original === 'number' ? Number(input.value) : input.value;
            if (value !== original) changed[key] = value;
        }
        const body = { fields: changed, importance: Number(importance.value) };
        if (unlock) body.unlock = true;
        try {
            await state.client.patchNode(chatId, node.id, body);
            await refreshBrowser();
        } catch (e) {
            if (e.status === 409 && !unlock && await confirmPopup('This memory is locked. Unlock it and save the edit?')) return save(true);
            error.textContent = e.field ? `${e.field}: ${e.message}` : e.message;
        }
    };
    editor.append(h('div', { class: 'flex-container' }, [
        h('button', { class: 'menu_button stbme_small', text: 'Save', 'data-action': 'save', onclick: () => save() }),
        h('button', { class: 'menu_button stbme_small', text: 'Cancel', onclick: () => editor.remove() }),
    ]));
    row.append(editor);
}

// --------------------------------------------------------------------------------------------------
// Start

async function init() {
    const c = ctx();
    state.settings = getSettings(c.extensionSettings);
    makeClient();
    registerEvents();
    state.ready = true;
    try {
        await renderPanel();
    } catch (error) {
        console.error(LOG, 'cannot render the settings panel', error);
    }
    addMenuButton();
    await registerSlashCommands();
    startHealthLoop();
    state.chatId = currentChatId();
    if (state.chatId && state.settings.enabled) {
        loadChatSettings(state.chatId).catch(() => {});
        scheduleSync({ force: true, delay: 50 });
    }
    console.log(LOG, `loaded ${VERSION} from ${EXTENSION_NAME}`);
}

/** For tests and debugging: the extension's state and a few actions. */
globalThis.stbme = {
    state,
    runSync,
    flushSync,
    checkHealth,
    refreshBrowser,
    statusText,
    module: MODULE_NAME,
};

if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', () => init().catch(e => console.error(LOG, e)));
else init().catch(e => console.error(LOG, e));
