// Chat sync with the sidecar (docs/api.md, "Sync: POST /v1/chats/{chat_id}/sync").
//
// The chat in SillyTavern is the truth. We send the chat's length, a contiguous slice of messages
// (normally the tail), and chain anchors so the sidecar can prove the untouched prefix is equal.
// We keep the chains we last synced per chat, so the slice starts at the first index that changed
// locally (an edit, delete or swipe far back resends from there, not the whole chat). The sidecar
// stays the judge: it answers `need_more` with `need_from` whenever it cannot prove the prefix.
// Pure module: no SillyTavern imports.

import { chainHash, messageHash, messageParts } from './hash.js';

/** Messages sent for a chat this client has not synced before (the sidecar asks for more if needed). */
export const DEFAULT_TAIL = 4;
/** Client-side cap on messages per request; the sidecar's `server.max_sync_messages` may lower it. */
export const DEFAULT_MAX_CHUNK = 500;

export class SyncError extends Error {
    /**
     * @param {string} message
     * @param {object} [response] the sidecar response that made the sync fail
     */
    constructor(message, response) {
        super(message);
        this.name = 'SyncError';
        this.response = response;
    }
}

/**
 * Indexes to anchor for a slice starting at `sliceStart`: always `sliceStart - 1` (when > 0), plus
 * `length - 1 - 2^j` for j = 0, 1, 2, ... that lie before the slice (anchors inside the slice prove
 * nothing, the slice carries those messages). Sorted descending.
 * @param {number} length chat length
 * @param {number} sliceStart first index in the slice
 * @returns {number[]}
 */
export function anchorIndexes(length, sliceStart) {
    const set = new Set();
    if (sliceStart > 0) set.add(sliceStart - 1);
    for (let step = 1; length - 1 - step >= 0; step *= 2) {
        const index = length - 1 - step;
        if (index < sliceStart) set.add(index);
    }
    return [...set].sort((a, b) => b - a);
}

/**
 * The wire form of one chat message.
 * @param {object} message an element of `getContext().chat`
 * @param {number} index its index in the chat
 * @param {{role: string, name: string, text: string}} [parts] precomputed `messageParts(message)`
 */
export function wireMessage(message, index, parts = messageParts(message)) {
    return {
        index,
        role: parts.role,
        name: parts.name,
        text: parts.text,
        swipe_id: Number.isInteger(message?.swipe_id) ? message.swipe_id : 0,
        send_date: message?.send_date == null ? '' : String(message.send_date),
    };
}

/**
 * Per-message hashes and prefix chains of a chat, recomputed only from the first message that changed
 * since the last call (hashing a long chat on every event would stall a phone).
 */
export class ChainCache {
    constructor() {
        /** @type {{role: string, name: string, text: string}[]} */
        this.parts = [];
        /** @type {string[]} */
        this.hashes = [];
        /** @type {string[]} */
        this.chains = [];
    }

    /**
     * Bring the cache up to date with `chat` and return a snapshot that later mutation of `chat`
     * does not change.
     * @param {object[]} chat
     * @returns {{length: number, messages: object[], parts: object[], hashes: string[], chains: string[]}}
     */
    update(chat) {
        const length = chat.length;
        let firstChanged = Math.min(length, this.parts.length);
        for (let i = 0; i < Math.min(length, this.parts.length); i++) {
            const p = messageParts(chat[i]);
            const old = this.parts[i];
            if (p.role !== old.role || p.name !== old.name || p.text !== old.text) {
                firstChanged = i;
                break;
            }
        }
        this.parts.length = firstChanged;
        this.hashes.length = firstChanged;
        this.chains.length = firstChanged;
        let prev = firstChanged > 0 ? this.chains[firstChanged - 1] : '';
        for (let i = firstChanged; i < length; i++) {
            const p = messageParts(chat[i]);
            const h = messageHash(p.role, p.name, p.text);
            prev = chainHash(prev, h);
            this.parts.push(p);
            this.hashes.push(h);
            this.chains.push(prev);
        }
        return {
            length,
            messages: chat.slice(0, length),
            parts: this.parts.slice(),
            hashes: this.hashes.slice(),
            chains: this.chains.slice(),
        };
    }
}

/**
 * The request body for a slice [start, end) of a snapshot.
 * @param {{length: number, messages: object[], parts: object[], chains: string[]}} snap
 * @param {number} start
 * @param {number} end exclusive
 */
export function buildSyncRequest(snap, start, end) {
    const messages = [];
    for (let i = start; i < end; i++) messages.push(wireMessage(snap.messages[i], i, snap.parts[i]));
    const anchors = anchorIndexes(snap.length, start).map(index => ({ index, chain: snap.chains[index] }));
    return { length: snap.length, messages, anchors };
}

/**
 * First index where two chain lists differ (the shorter length when one is a prefix of the other).
 * @param {string[]} a
 * @param {string[]} b
 */
export function firstDifference(a, b) {
    const n = Math.min(a.length, b.length);
    for (let i = 0; i < n; i++) if (a[i] !== b[i]) return i;
    return n;
}

/**
 * Where the next sync of a chat should start, or null when nothing changed since the last sync.
 * @param {string[]|null} syncedChains chains acknowledged by the sidecar last time (null: never synced)
 * @param {string[]} chains current chains
 * @param {{force?: boolean, tail?: number}} [options]
 * @returns {number|null}
 */
export function planSyncStart(syncedChains, chains, { force = false, tail = DEFAULT_TAIL } = {}) {
    const length = chains.length;
    if (!syncedChains) return Math.max(0, length - tail);
    const diff = firstDifference(syncedChains, chains);
    if (!force && diff === length && syncedChains.length === length) return null;
    // Always resend at least the last message, so every request's slice ends at length - 1 and the
    // sidecar cuts anything it stored past `length` (a delete at the end).
    return Math.max(0, Math.min(diff, length - 1));
}

/**
 * Keeps, per chat, what the sidecar has acknowledged and runs the sync protocol with `need_more`.
 */
export class ChatSyncer {
    /**
     * @param {object} options
     * @param {(chatId: string, body: object) => Promise<object>} options.send POSTs a sync body, returns the JSON
     * @param {number} [options.maxChunk] most messages per request
     * @param {number} [options.tail] messages sent for a chat never synced by this client
     */
    constructor({ send, maxChunk = DEFAULT_MAX_CHUNK, tail = DEFAULT_TAIL }) {
        this.send = send;
        this.maxChunk = maxChunk;
        this.tail = tail;
        /** @type {Map<string, ChainCache>} */
        this.caches = new Map();
        /** @type {Map<string, string[]>} */
        this.synced = new Map();
        /** @type {Map<string, object>} last sidecar response per chat */
        this.lastResponse = new Map();
    }

    /** @param {string} chatId */
    cache(chatId) {
        let c = this.caches.get(chatId);
        if (!c) {
            c = new ChainCache();
            this.caches.set(chatId, c);
        }
        return c;
    }

    /** Drop what we know about a chat (deleted, or the sidecar lost it). */
    forget(chatId) {
        this.caches.delete(chatId);
        this.synced.delete(chatId);
        this.lastResponse.delete(chatId);
    }

    /** Forget every chat's acknowledged state, e.g. after reconnecting to a different sidecar. */
    forgetAcknowledged() {
        this.synced.clear();
    }

    /**
     * Sync one chat. Resolves with `{status: 'unchanged'|'synced'|'stale', requests, response}`.
     * @param {string} chatId
     * @param {object[]} chat `getContext().chat`
     * @param {object} [options]
     * @param {boolean} [options.force] send the tail even if nothing changed locally
     * @param {() => boolean} [options.isCurrent] false once the user left the chat: stop between requests
     */
    async sync(chatId, chat, { force = false, isCurrent = () => true } = {}) {
        const snap = this.cache(chatId).update(chat);
        let start = planSyncStart(this.synced.get(chatId) ?? null, snap.chains, { force, tail: this.tail });
        if (start === null) return { status: 'unchanged', requests: 0, response: this.lastResponse.get(chatId) ?? null };

        const chunk = Math.max(1, this.maxChunk);
        const maxRequests = Math.ceil(snap.length / chunk) * 3 + 10;
        let requests = 0;
        let previous = null;
        for (;;) {
            if (requests >= maxRequests) throw new SyncError(`sync of ${snap.length} messages did not settle after ${requests} requests`);
            const end = Math.min(snap.length, start + chunk);
            const body = buildSyncRequest(snap, start, end);
            const response = await this.send(chatId, body);
            requests++;
            if (!isCurrent()) return { status: 'stale', requests, response };
            if (!response || response.ok === false) throw new SyncError(response?.error || 'sync failed', response);
            this.lastResponse.set(chatId, response);

            if (response.status === 'synced') {
                if (end >= snap.length) {
                    this.synced.set(chatId, snap.chains);
                    return { status: 'synced', requests, response };
                }
                start = end;
            } else if (response.status === 'need_more') {
                const from = response.need_from;
                if (!Number.isInteger(from) || from < 0 || from > snap.length) {
                    throw new SyncError(`sidecar asked for messages from ${from}, chat has ${snap.length}`, response);
                }
                const next = Math.max(0, Math.min(from, snap.length - 1));
                // Asking again for exactly what we just sent in full would loop forever.
                if (previous && previous.start === start && previous.end === end && next === start && end >= snap.length) {
                    throw new SyncError(`sidecar keeps asking for messages from ${from}`, response);
                }
                previous = { start, end };
                start = next;
            } else {
                throw new SyncError(`unexpected sync status ${JSON.stringify(response.status)}`, response);
            }
            if (snap.length === 0) {
                this.synced.set(chatId, snap.chains);
                return { status: 'synced', requests, response };
            }
        }
    }
}
