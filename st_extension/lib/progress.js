// Progress of a chat's processing in words: the sidecar's per-chat progress (the chat status' `progress`,
// or a live `progress` message of task `extract`) as one line and a fraction for a progress bar.
// Pure module: no SillyTavern imports.

/**
 * "about 40 s left", "about 3 min 20 s left", "about 1 h 05 min left".
 * @param {number|null|undefined} seconds
 * @returns {string} '' when unknown
 */
export function timeLeft(seconds) {
    if (!Number.isFinite(seconds) || seconds < 0) return '';
    const s = Math.round(seconds);
    if (s < 60) return `about ${s} s left`;
    const minutes = Math.floor(s / 60);
    if (minutes < 60) return `about ${minutes} min ${String(s % 60).padStart(2, '0')} s left`;
    return `about ${Math.floor(minutes / 60)} h ${String(minutes % 60).padStart(2, '0')} min left`;
}

/**
 * The same numbers from either source.
 * @param {object} source a status `progress` ({messages, embedding, eta_s, working}) or a live message
 *   ({done, total, embedded, embed_total, eta_s, working})
 * @returns {{done: number, total: number, embedded: number, embedTotal: number, eta: number|null, working: boolean}}
 */
export function normalizeProgress(source) {
    const p = source ?? {};
    const num = value => (Number.isFinite(value) ? value : 0);
    if (p.messages) {
        return {
            done: num(p.messages.done), total: num(p.messages.total),
            embedded: num(p.embedding?.done), embedTotal: num(p.embedding?.total),
            eta: Number.isFinite(p.eta_s) ? p.eta_s : null, working: !!p.working,
        };
    }
    return {
        done: num(p.done), total: num(p.total), embedded: num(p.embedded), embedTotal: num(p.embed_total),
        eta: Number.isFinite(p.eta_s) ? p.eta_s : null, working: p.working !== false,
    };
}

/**
 * One line: "Remembering: 340/2000 messages (17%), 330/340 memories embedded, about 3 min 20 s left".
 * @param {object} source see normalizeProgress
 * @returns {string}
 */
export function progressText(source) {
    const p = normalizeProgress(source);
    const pct = p.total ? Math.floor((p.done / p.total) * 100) : 100;
    const parts = [`${p.done}/${p.total} messages (${pct}%)`];
    if (p.embedTotal) parts.push(`${p.embedded}/${p.embedTotal} memories embedded`);
    const left = p.working ? timeLeft(p.eta) : '';
    if (left) parts.push(left);
    return `${p.working ? 'Remembering' : 'Remembered'}: ${parts.join(', ')}`;
}

/**
 * The bar's fraction (0..1): messages processed; a chat whose messages are done but whose memories are
 * still being embedded stays just short of full.
 * @param {object} source see normalizeProgress
 * @returns {number}
 */
export function progressFraction(source) {
    const p = normalizeProgress(source);
    if (!p.total) return 1;
    const messages = Math.min(1, p.done / p.total);
    const embedding = p.embedTotal ? Math.min(1, p.embedded / p.embedTotal) : 1;
    return Math.min(messages, embedding < 1 ? 0.99 : 1);
}

/** Work left before a run counts as long enough to show in the chat itself (a few replies never do). */
export const LONG_RUN = Object.freeze({ messages: 10, embeddings: 30 });

/**
 * Is this a long ingest worth a bar in the chat: working, with many messages or memories still to do?
 * @param {object} source see normalizeProgress
 */
export function isLongRun(source) {
    const p = normalizeProgress(source);
    return p.working && (p.total - p.done >= LONG_RUN.messages || p.embedTotal - p.embedded >= LONG_RUN.embeddings);
}
