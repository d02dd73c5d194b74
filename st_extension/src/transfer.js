// Export and import of the open chat's memories (JSON; also a graph exported by the original ST-BME).

import { $id, h } from './dom.js';
import { confirmPopup, currentChatId, toast } from './st.js';

function requireChat() {
    const chatId = currentChatId();
    if (!chatId) throw new Error('Open a chat first.');
    return chatId;
}

/**
 * @param {object} deps
 * @param {ReturnType<import('./connection.js').createConnection>} deps.connection
 * @param {() => void} deps.onImported memories changed
 */
export function createTransfer({ connection, onImported }) {
    return {
        /** Download this chat's memories as a JSON file. */
        async exportChat() {
            const chatId = requireChat();
            const data = await connection.client.exportChat(chatId);
            const blob = new Blob([JSON.stringify(data, null, 2)], { type: 'application/json' });
            const url = URL.createObjectURL(blob);
            const a = h('a', { href: url, download: `stbme-${chatId.replace(/[^\w.-]+/g, '_')}.json` });
            document.body.append(a);
            a.click();
            a.remove();
            setTimeout(() => URL.revokeObjectURL(url), 10000);
            toast('success', `Exported ${data.nodes?.length ?? 0} memories.`);
        },

        /**
         * Import the file picked in `input`, merging or replacing as the import mode select says.
         * @param {HTMLInputElement} input
         */
        async importFile(input) {
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
            const res = await connection.client.importChat(chatId, data, mode);
            const skipped = Array.isArray(res.skipped) ? res.skipped.length : 0;
            toast('success', `Imported ${res.imported?.nodes ?? 0} memories and ${res.imported?.edges ?? 0} links${skipped ? `; skipped ${skipped}` : ''}.`);
            onImported();
        },

        /** Rebuild this chat's vector index (a sidecar job; progress comes on the live channel). */
        async reindex() {
            const res = await connection.client.reindex(requireChat());
            toast('info', `Rebuilding the index of this chat (job ${res.job_id}). Progress shows below.`);
        },
    };
}
