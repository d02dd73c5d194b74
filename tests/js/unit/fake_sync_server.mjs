// A reference model of the sidecar's side of the sync protocol (docs/api.md), used to check that the
// extension's client converges for every kind of chat change. It recomputes hashes from the texts it
// receives, exactly as the sidecar does.
import { chainHash, messageHash } from '../../../st_extension/lib/hash.js';

export class FakeSyncServer {
    constructor({ maxSyncMessages = 2000 } = {}) {
        this.maxSyncMessages = maxSyncMessages;
        /** @type {Map<string, {messages: object[], chains: string[]}>} */
        this.chats = new Map();
        this.requests = [];
    }

    stored(chatId) {
        if (!this.chats.has(chatId)) this.chats.set(chatId, { messages: [], chains: [] });
        return this.chats.get(chatId);
    }

    /** Handle POST /v1/chats/{chatId}/sync */
    sync(chatId, body) {
        this.requests.push({ chatId, body: structuredClone(body) });
        const { length, messages, anchors } = body;
        if (messages.length > this.maxSyncMessages) return { ok: false, error: 'too many messages', status: 413, field: 'messages' };
        messages.forEach((m, i) => {
            if (i > 0 && m.index !== messages[i - 1].index + 1) throw new Error('slice not contiguous');
            if (m.index >= length) throw new Error('index past length');
        });
        const s = this.stored(chatId);
        const start = messages.length ? messages[0].index : length;
        const anchorAt = new Map(anchors.map(a => [a.index, a.chain]));
        // Prove the prefix before the slice.
        if (start > 0 && !(s.chains[start - 1] !== undefined && anchorAt.get(start - 1) === s.chains[start - 1])) {
            let proven = -1;
            for (const a of [...anchors].sort((x, y) => y.index - x.index)) {
                if (a.index < start && s.chains[a.index] === a.chain) { proven = a.index; break; }
            }
            const oldLength = s.chains.length;
            s.messages.length = Math.min(oldLength, proven + 1);
            s.chains.length = Math.min(oldLength, proven + 1);
            return { ok: true, status: 'need_more', need_from: proven + 1, stored_length: s.chains.length, diverged_at: proven + 1 < oldLength ? proven + 1 : null };
        }
        let diverged = null;
        let prev = start > 0 ? s.chains[start - 1] : '';
        messages.forEach(m => {
            const h = messageHash(m.role, m.name, m.text);
            prev = chainHash(prev, h);
            if (diverged === null && s.chains[m.index] !== undefined && s.chains[m.index] !== prev) diverged = m.index;
            s.messages[m.index] = m;
            s.chains[m.index] = prev;
        });
        const end = start + messages.length;
        if (end >= length) {
            if (s.chains.length > length && diverged === null) diverged = length;
            s.messages.length = length;
            s.chains.length = length;
            return { ok: true, status: 'synced', stored_length: length, diverged_at: diverged, need_from: null, processed_upto: length - 1, queued: true };
        }
        return { ok: true, status: 'need_more', need_from: end, stored_length: s.chains.length, diverged_at: diverged };
    }
}
