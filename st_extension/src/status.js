// The status of memory in words: the panel's status line and progress line, and /memory-status.

import { statusReport, syncSummary } from '../lib/wording.js';
import { $id } from './dom.js';
import { currentChatId } from './st.js';

/**
 * @param {object} deps
 * @param {ReturnType<import('../lib/settings.js').getSettings>} deps.settings
 * @param {ReturnType<import('./connection.js').createConnection>} deps.connection
 * @param {ReturnType<import('./live_link.js').createLiveLink>} deps.live
 * @param {ReturnType<import('./chat_sync.js').createChatSync>} deps.chatSync
 * @param {() => object|null} deps.lastInjection
 */
export function createStatus({ settings, connection, live, chatSync, lastInjection }) {
    return {
        /** Redraw the panel's status dot, status line and progress line. */
        render() {
            const dot = $id('stbme_status_dot');
            const text = $id('stbme_status_text');
            if (!dot || !text) return;
            const status = connection.status;
            const cls = { ok: 'ok', proxy: 'proxy', down: 'down', off: 'off' }[status] ?? 'unknown';
            dot.className = `stbme_dot stbme_dot_${cls}`;
            dot.title = connection.label();
            const up = status === 'ok' || status === 'proxy';
            const label = connection.label();
            const parts = [label[0].toUpperCase() + label.slice(1)];
            if (up && settings.liveChannel && live.state.state !== 'open') parts.push('progress updates reconnecting');
            const chatId = currentChatId();
            const lastSync = chatSync.lastSync;
            if (up && chatId && lastSync?.chatId === chatId) {
                const summary = syncSummary(lastSync);
                if (summary) parts.push(`this chat: ${summary}`);
            }
            text.textContent = parts.join(' · ');
            text.dataset.state = cls;
            const progress = $id('stbme_progress');
            if (progress) {
                progress.textContent = status === 'down' ? connection.lastError : live.progress;
                progress.classList.toggle('stbme_error', status === 'down');
            }
        },

        /** A few lines about memory in the open chat, for /memory-status. */
        async text() {
            const chatId = currentChatId();
            const up = connection.status === 'ok' || connection.status === 'proxy';
            let status = null;
            let statusError = '';
            if (chatId && settings.enabled) {
                try {
                    status = await connection.client.status(chatId);
                } catch (error) {
                    if (error.status !== 404) statusError = error.message;
                }
            }
            return statusReport({
                connection: connection.label(),
                version: up ? connection.health?.version : '',
                problem: connection.status === 'down' ? connection.lastError : '',
                enabled: settings.enabled,
                chatOpen: !!chatId,
                status,
                statusError,
                injection: lastInjection(),
            }).join('\n');
        },
    };
}
