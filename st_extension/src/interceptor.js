// The generate interceptor (manifest.json `generate_interceptor`): before each generation, recall the
// memories for the user's new input and put the block into our extension prompt slot. ST awaits it with
// no timeout (extensions.js `runGenerationInterceptors`), so everything here is bounded and nothing
// throws: a slow or dead sidecar means the generation goes on without memory. Owns: the last injection.

import { adviceFor, withDeadline } from '../lib/failopen.js';
import { buildRecallRequest, injectionArgs } from '../lib/settings.js';
import { LOG, ctx, currentChatId, promptEnums } from './st.js';

/** Key of our slot in ST's `extension_prompts`. */
export const PROMPT_KEY = 'stbme_memory';

/** Clear our prompt slot (an empty value is skipped by ST's getExtensionPrompt). */
export function clearSlot() {
    const { types, roles } = promptEnums();
    try {
        ctx().setExtensionPrompt(PROMPT_KEY, '', types.IN_CHAT, 0, false, roles.SYSTEM);
    } catch (error) {
        console.error(LOG, 'cannot clear the prompt slot', error);
    }
}

/**
 * @param {object} deps
 * @param {ReturnType<import('../lib/settings.js').getSettings>} deps.settings
 * @param {ReturnType<import('./connection.js').createConnection>} deps.connection
 * @param {ReturnType<import('./chat_sync.js').createChatSync>} deps.chatSync
 * @param {ReturnType<import('./sidecar_settings.js').createSidecarSettings>} deps.sidecarSettings
 * @param {(injection: object|null) => void} deps.onInjection the last injection changed (redraw)
 */
export function createInterceptor({ settings, connection, chatSync, sidecarSettings, onInjection }) {
    let last = null;
    const record = injection => {
        last = injection;
        onInjection(last);
    };

    /**
     * @param {object[]} chat ST's coreChat (copies of the messages, system ones removed)
     * @param {number} contextSize max context in tokens
     * @param {(immediately: boolean) => void} _abort never called: memory never aborts a generation
     * @param {string} [type] generation type (newer ST passes it; 'quiet' is a background generation)
     */
    async function intercept(chat, contextSize, _abort, type) {
        if (type === 'quiet') return;
        const started = Date.now();
        try {
            clearSlot();
            if (!settings.enabled) {
                record({ status: 'off', at: started });
                return;
            }
            const chatId = currentChatId();
            if (!chatId) return;

            await chatSync.flush();
            if (currentChatId() !== chatId) return;

            const settingsPromise = sidecarSettings.hasChat(chatId)
                ? Promise.resolve(null)
                : withDeadline(() => sidecarSettings.loadChat(chatId), settings.recallTimeoutMs);
            const effective = sidecarSettings.effective(chatId);
            let budget = Number.isInteger(effective['recall.budget_tokens']) ? effective['recall.budget_tokens'] : null;
            // Never let memory take more than a quarter of a small model's context.
            if (budget && Number.isFinite(contextSize) && contextSize > 0) budget = Math.max(50, Math.min(budget, Math.floor(contextSize / 4)));
            const body = buildRecallRequest(chat, { recentMessages: settings.recentMessages, budgetTokens: budget });
            if (!body.query && body.recent.length) body.query = body.recent[body.recent.length - 1].text;
            if (!body.query.trim()) {
                record({ status: 'empty', at: started, chatId, reason: 'nothing to search for' });
                return;
            }

            const timeoutMs = connection.down ? Math.min(1000, settings.recallTimeoutMs) : settings.recallTimeoutMs;
            const [result] = await Promise.all([
                withDeadline(signal => connection.client.recall(chatId, body, { signal, timeoutMs: 0 }), timeoutMs),
                settingsPromise,
            ]);
            if (currentChatId() !== chatId) return;
            if (!result.ok) {
                connection.markDown(result);
                record({ status: 'failed', at: started, chatId, reason: adviceFor(result, { url: settings.sidecarUrl }), ms: result.ms });
                return;
            }
            connection.markUp();
            const recall = result.value;
            const text = typeof recall.text === 'string' ? recall.text : '';
            if (!text.trim()) {
                record({ status: 'empty', at: started, chatId, query: body.query, memories: [], ms: Date.now() - started });
                return;
            }
            const args = injectionArgs(sidecarSettings.effective(chatId), promptEnums());
            ctx().setExtensionPrompt(PROMPT_KEY, text, args.position, args.depth, !!settings.worldInfoScan, args.role);
            record({
                status: 'injected', at: started, chatId, query: body.query, text, tokens: recall.tokens,
                memories: Array.isArray(recall.memories) ? recall.memories : [], ms: Date.now() - started,
                took_ms: recall.took_ms, ...args,
            });
        } catch (error) {
            console.error(LOG, 'interceptor failed; generating without memory', error);
            clearSlot();
            record({ status: 'failed', at: started, reason: String(error?.message ?? error) });
        }
    }

    return {
        intercept,
        /** What the last generation got: `{status: 'injected'|'empty'|'failed'|'off', at, text, memories, ...}`. */
        get last() { return last; },
        /** The chat changed: nothing was injected into it yet. */
        reset() {
            record(null);
        },
    };
}
