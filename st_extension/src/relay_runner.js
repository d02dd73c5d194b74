// llm.mode = relay: the sidecar's memory LLM calls run on the user's current SillyTavern connection
// through ST's `generateRaw`, so no second API key is needed.

import { runRelayRequest } from '../lib/relay.js';
import { LOG, ctx, importSt } from './st.js';

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
 * @returns {(request: object) => Promise<object>} runs one relay_request, resolves with its relay_response
 */
export function createRelayRunner() {
    return async request => {
        const context = await relayContext();
        return runRelayRequest(request, () => context);
    };
}
