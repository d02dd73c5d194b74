// What the panel and /memory-status say, in a roleplayer's words: counts with their plurals, how much of
// the chat is remembered, why a memory was recalled. No raw ids, indexes or scores. Pure module.

/**
 * "1 message", "3 messages".
 * @param {number} n
 * @param {string} one
 * @param {string} [many] the plural, when it is not `one` + 's'
 */
export function plural(n, one, many = `${one}s`) {
    return `${n} ${n === 1 ? one : many}`;
}

/**
 * How much of the chat the sidecar holds and has remembered: "12 messages, all remembered",
 * "1 message, not remembered yet", "40 messages, 38 remembered".
 * @param {{stored_length?: number, processed_upto?: number} | null | undefined} sync the sidecar's sync answer
 * @returns {string} '' when unknown
 */
export function syncSummary(sync) {
    const stored = sync?.stored_length;
    if (!Number.isInteger(stored) || stored < 0) return '';
    const remembered = Number.isInteger(sync.processed_upto) ? Math.max(0, Math.min(stored, sync.processed_upto + 1)) : 0;
    const head = plural(stored, 'message');
    if (!stored) return 'no messages yet';
    if (remembered >= stored) return `${head}, all remembered`;
    if (remembered === 0) return `${head}, not remembered yet`;
    return `${head}, ${remembered} remembered`;
}

/**
 * Why a recalled memory was chosen, from the recall answer's `score_parts`, `pinned` and `core`.
 * @param {{pinned?: boolean, core?: boolean, score_parts?: Record<string, number>}} memory
 * @returns {string[]} short reasons, most telling first
 */
export function recallReasons(memory) {
    if (memory?.pinned) return ['pinned'];
    if (memory?.core) return ['always included'];
    const p = memory?.score_parts ?? {};
    const reasons = [];
    if (p.time) reasons.push('the day you asked about');
    if (p.latest) reasons.push('the latest on it');
    if (p.subject) reasons.push('said while what you refer to was talked about');
    if (p.lexical > 0) reasons.push('shares words with your message');
    else if (p.graph) reasons.push('linked to another memory found');
    else if (p.neighbour) reasons.push('next to a message found');
    else reasons.push('similar in meaning');
    return reasons;
}

/**
 * /memory-status in words.
 * @param {object} s
 * @param {string} s.connection the connection in words ("connected", "unreachable", ...)
 * @param {string} [s.version] the sidecar's version
 * @param {string} [s.problem] what to do while it is unreachable
 * @param {boolean} s.enabled memory turned on in the panel
 * @param {boolean} s.chatOpen
 * @param {object|null|undefined} s.status the chat's status (GET /v1/chats/{id}/status), null when unknown to the sidecar
 * @param {string} [s.statusError] why the status could not be read
 * @param {object|null} [s.injection] the last generation's injection
 * @returns {string[]} lines
 */
export function statusReport({ connection, version, problem, enabled, chatOpen, status, statusError, injection }) {
    const lines = [`Memory: ${connection}${version ? ` (sidecar ${version})` : ''}.`];
    if (problem) lines.push(problem);
    if (!enabled) lines.push('Memory is turned off in the ST-BME settings.');
    if (!chatOpen) {
        lines.push('No chat is open.');
        return lines;
    }
    if (statusError) lines.push(`This chat: its status could not be read (${statusError}).`);
    else if (!status) lines.push('This chat: nothing remembered yet (the sidecar has not seen it).');
    else {
        const summary = syncSummary({ stored_length: status.messages, processed_upto: status.processed_upto });
        lines.push(`This chat: ${summary}, as ${plural(status.nodes ?? 0, 'memory', 'memories')}.`);
        const left = (status.messages ?? 0) - ((status.processed_upto ?? -1) + 1);
        if (status.jobs?.pending || status.progress?.working) {
            lines.push(left > 0 ? `Working on it: ${plural(left, 'message')} to go.` : 'Working on it: finishing the new memories.');
        }
        if (status.jobs?.failed && status.jobs?.last_error) {
            lines.push(`The last memory update failed: ${status.jobs.last_error}. It is tried again with the next message.`);
        }
    }
    const inj = injection;
    if (inj?.status === 'injected') {
        lines.push(`Last reply: ${plural(inj.memories?.length ?? 0, 'memory', 'memories')} used${inj.tokens ? ` (${plural(inj.tokens, 'token')})` : ''}.`);
    } else if (inj?.status === 'empty') lines.push('Last reply: nothing relevant was found.');
    else if (inj?.status === 'failed') lines.push(`Last reply: generated without memory. ${inj.reason ?? ''}`.trim());
    return lines;
}
