// llm.mode = relay: the sidecar's memory LLM calls run on the user's current SillyTavern connection
// through ST's `generateRaw`, so no second API key is needed. The user's generation settings are never
// changed under a chat generation: on Chat Completion the relayed request carries its own length; on
// other APIs (where ST 1.12.6 can only pass a length through its global) relayed requests and chat
// generations take turns (lib/generation_gate.js). On Chat Completion the answer's JSON Schema goes to
// generateRaw too (ST 1.13+), so the connection is held to the shape the sidecar reads.

import { GenerationGate } from '../lib/generation_gate.js';
import { runRelayRequest } from '../lib/relay.js';
import { LOG, ctx, eventTypes, importSt } from './st.js';

/**
 * ST's context with `generateRaw`. In ST 1.12 `generateRaw` is only an export of script.js, not on
 * getContext() (newer ST has it there). Never throws.
 */
async function relayContext() {
    const c = ctx();
    if (typeof c.generateRaw === 'function') return c;
    try {
        const { generateRaw } = await importSt('script.js');
        return typeof generateRaw === 'function' ? { ...c, generateRaw } : c;
    } catch (error) {
        console.warn(LOG, 'generateRaw not found', error);
        return c;
    }
}

/**
 * Listen to ST's generation events and return the relay runner.
 * @returns {(request: object) => Promise<object>} runs one relay_request, resolves with its relay_response
 */
export function createRelayRunner() {
    const gate = new GenerationGate();
    const c = ctx();
    const et = eventTypes();
    // script.js Generate: GENERATION_STARTED(type, options, dryRun) comes first and is awaited; a dry run
    // only assembles a prompt. The request is built at GENERATE_AFTER_DATA (text completion) or
    // CHAT_COMPLETION_SETTINGS_READY (openai.js); GENERATION_ENDED/STOPPED end it.
    c.eventSource.on(et.GENERATION_STARTED, (_type, _options, dryRun) => (dryRun ? undefined : gate.chatStarting()));
    for (const name of ['GENERATE_AFTER_DATA', 'CHAT_COMPLETION_SETTINGS_READY', 'GENERATION_ENDED', 'GENERATION_STOPPED']) {
        if (et[name]) c.eventSource.on(et[name], () => gate.chatSettled());
    }

    // Connections that rejected a schema or answered it without JSON: asked in plain text for this page's life
    // (a reload tries them again).
    const schemaRefused = new Set();
    return async request => {
        const context = await relayContext();
        const types = context.eventTypes ?? context.event_types ?? {};
        const structured = context.mainApi === 'openai';
        if (structured && types.CHAT_COMPLETION_SETTINGS_READY) {
            return runRelayRequest(request, () => context, { length: 'request', structured, schemaRefused });
        }
        return gate.runExclusive(() => runRelayRequest(request, () => context, { length: 'argument', structured, schemaRefused }));
    };
}
