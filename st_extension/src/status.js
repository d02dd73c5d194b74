// The status of memory in words: the panel's status line and progress line, and /memory-status.

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
            const parts = [connection.label()];
            const up = status === 'ok' || status === 'proxy';
            if (up && connection.health?.version) parts.push(`sidecar ${connection.health.version}`);
            if (status === 'ok' && settings.liveChannel) parts.push(live.state.state === 'open' ? 'live' : 'live channel reconnecting');
            const chatId = currentChatId();
            const lastSync = chatSync.lastSync;
            if (up && chatId && lastSync?.chatId === chatId) {
                parts.push(`synced ${lastSync.stored_length ?? '?'} messages, memories up to #${lastSync.processed_upto ?? '?'}`);
            }
            text.textContent = parts.join(' · ');
            text.dataset.state = cls;
            const progress = $id('stbme_progress');
            if (progress) {
                progress.textContent = status === 'down' ? connection.lastError : live.progress;
                progress.classList.toggle('stbme_error', status === 'down');
            }
        },

        /** A few lines about the sidecar and the open chat, for /memory-status. */
        async text() {
            const chatId = currentChatId();
            const lines = [`Sidecar: ${settings.sidecarUrl} (${connection.client.route}) — ${connection.label()}`];
            if (!settings.enabled) lines.push('Memory is turned off in the ST-BME settings.');
            if (!chatId) {
                lines.push('No chat open.');
                return lines.join('\n');
            }
            try {
                const s = await connection.client.status(chatId);
                lines.push(`Chat: ${chatId}`);
                lines.push(`Messages synced: ${s.messages}; memories: ${s.nodes}; processed up to message ${s.processed_upto}`);
                lines.push(`Jobs pending: ${s.jobs?.pending ?? 0}, failed: ${s.jobs?.failed ?? 0}${s.jobs?.last_error ? ` (last error: ${s.jobs.last_error})` : ''}`);
                if (s.index) lines.push(`Index: ${s.index.count ?? 'not loaded'}${s.index.count != null ? ' vectors' : ''}, embedder ${s.index.embedder}`);
            } catch (error) {
                lines.push(error.status === 404 ? `Chat ${chatId} is not in the sidecar yet.` : `Status unavailable: ${error.message}`);
            }
            const inj = lastInjection();
            if (inj) lines.push(`Last generation: ${inj.status}${inj.memories ? `, ${inj.memories.length} memories` : ''}${inj.tokens ? `, ${inj.tokens} tokens` : ''}`);
            return lines.join('\n');
        },
    };
}
