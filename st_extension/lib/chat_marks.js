// The per-message memory marker in the chat: which messages have memories (the sidecar's
// GET /v1/chats/{id}/messages/memories) and which of them fed the block injected into the last reply (the
// recall answer's memories and their message ranges). Pure module: no ST, no DOM.

import { plural } from './wording.js';

/**
 * A memory drawn from more messages than this (a summary of a long stretch, the synopsis) does not light
 * each of them as "in the last block": it would light half the chat. Its popup still lists it.
 */
export const WIDEST_LIT_RANGE = 20;

/**
 * Messages whose memories went into the last injected block, and how many of them each.
 * @param {{seq_range?: [number, number] | null}[] | null | undefined} memories the recall answer's `memories`
 * @returns {Map<number, number>}
 */
export function usedMessages(memories) {
    const used = new Map();
    for (const m of Array.isArray(memories) ? memories : []) {
        const range = m?.seq_range;
        if (!Array.isArray(range) || !range.every(Number.isInteger)) continue;
        const [first, last] = range;
        if (last < first || last - first >= WIDEST_LIT_RANGE) continue;
        for (let i = first; i <= last; i++) used.set(i, (used.get(i) ?? 0) + 1);
    }
    return used;
}

/**
 * The remembered counts of a sidecar answer, by message index.
 * @param {{messages?: {index: number, memories: number}[]} | null | undefined} answer
 * @returns {Map<number, number>}
 */
export function rememberedMessages(answer) {
    const out = new Map();
    for (const m of answer?.messages ?? []) {
        if (Number.isInteger(m?.index) && m.memories > 0) out.set(m.index, m.memories);
    }
    return out;
}

/**
 * A message's marker: 'used' (its memories were in the last block), 'remembered', or null (nothing to show).
 * @param {number} index
 * @param {Map<number, number>} remembered
 * @param {Map<number, number>} used
 * @returns {{state: 'used' | 'remembered' | null, memories: number, used: number}}
 */
export function markFor(index, remembered, used) {
    const memories = remembered.get(index) ?? 0;
    const inBlock = used.get(index) ?? 0;
    const state = inBlock ? 'used' : (memories ? 'remembered' : null);
    return { state, memories: Math.max(memories, inBlock), used: inBlock };
}

/**
 * The marker's tooltip.
 * @param {{state: string | null, memories: number, used: number}} mark
 */
export function markTitle(mark) {
    if (!mark.state) return '';
    const what = `Remembered: ${plural(mark.memories, 'memory', 'memories')}`;
    const block = mark.used ? `; ${mark.used === 1 ? 'one was' : `${mark.used} were`} in the memory block of the last reply` : '';
    return `${what}${block}. Click to see them.`;
}
