// Keeping the sidecar's copy of the open chat current: chat events schedule one debounced sync, one
// sync runs at a time, and the interceptor flushes pending changes before recall. Owns: the syncer's
// per-chat caches, the debounce timer, the sync in flight, the last sync answer.

import { withDeadline } from '../lib/failopen.js';
import { singleFlight } from '../lib/single_flight.js';
import { ChatSyncer, DEFAULT_MAX_CHUNK } from '../lib/sync.js';
import { ctx, currentChatId } from './st.js';

/**
 * @param {object} deps
 * @param {ReturnType<import('../lib/settings.js').getSettings>} deps.settings
 * @param {ReturnType<import('./connection.js').createConnection>} deps.connection
 * @param {() => void} deps.onSynced a sync finished (redraw the status line)
 */
export function createChatSync({ settings, connection, onSynced }) {
    const syncer = new ChatSyncer({
        send: (chatId, body) => connection.client.sync(chatId, body),
        maxChunk: DEFAULT_MAX_CHUNK,
    });
    let timer = null;
    let forceNext = false;
    let lastSync = null;

    async function syncOnce() {
        const chatId = currentChatId();
        if (!chatId || !settings.enabled) return;
        const force = forceNext;
        forceNext = false;
        try {
            const result = await syncer.sync(chatId, ctx().chat, { force, isCurrent: () => currentChatId() === chatId });
            if (result.status === 'stale') return;
            lastSync = { chatId, at: Date.now(), ...(result.response ?? {}) };
            if (result.requests) connection.markUp();
            onSynced();
        } catch (error) {
            connection.markDown({ reason: 'error', error });
        }
    }

    /** Run a sync now; joins the one in flight (and runs once more after it if asked meanwhile). */
    const run = singleFlight(syncOnce);

    return {
        run,

        /**
         * Sync the current chat soon (debounced). Returns at once: ST awaits event listeners in turn.
         * @param {{force?: boolean, delay?: number}} [options] force: resend the tail even if unchanged
         */
        schedule({ force = false, delay } = {}) {
            if (!settings.enabled) return;
            forceNext = forceNext || force;
            clearTimeout(timer);
            timer = setTimeout(() => {
                timer = null;
                run().catch(() => {});
            }, delay ?? settings.syncDebounceMs);
        },

        /** Sync pending changes before recall, bounded by `syncTimeoutMs`; never throws. */
        async flush() {
            clearTimeout(timer);
            timer = null;
            if (connection.down) {
                run().catch(() => {});
                return;
            }
            await withDeadline(() => run(), settings.syncTimeoutMs);
        },

        /** The chat was deleted: drop what we know about it. */
        forget(chatId) {
            syncer.forget(chatId);
        },

        /** Another sidecar (or route): what the old one acknowledged proves nothing. */
        forgetAcknowledged() {
            syncer.forgetAcknowledged();
        },

        /** The sidecar's `server.max_sync_messages` caps our requests. */
        limitChunk(serverMax) {
            syncer.maxChunk = Number.isInteger(serverMax) && serverMax > 0 ? Math.min(DEFAULT_MAX_CHUNK, serverMax) : DEFAULT_MAX_CHUNK;
        },

        /** The sidecar's answer to the last sync: `{chatId, at, stored_length, processed_upto, ...}`. */
        get lastSync() { return lastSync; },
    };
}
