// Fail-open helpers: SillyTavern awaits every event listener and every generate interceptor with no
// timeout (public/lib/eventemitter.js `emit`, public/scripts/extensions.js `runGenerationInterceptors`),
// so anything that touches the network must be raced against a short deadline and must never throw
// into ST. Pure module: no SillyTavern imports.

export class TimeoutError extends Error {
    /** @param {number} ms */
    constructor(ms) {
        super(`no answer within ${ms} ms`);
        this.name = 'TimeoutError';
        this.timeoutMs = ms;
    }
}

/**
 * Run `work(signal)` with a deadline. The signal aborts when the deadline passes or `outer` aborts, so a
 * fetch given that signal stops at once. Never rejects: resolves with `{ok: true, value, ms}` or
 * `{ok: false, reason: 'timeout'|'error'|'aborted', error, ms}`.
 * @template T
 * @param {(signal: AbortSignal) => Promise<T>} work
 * @param {number} ms deadline in milliseconds
 * @param {{outer?: AbortSignal, now?: () => number}} [options]
 * @returns {Promise<{ok: true, value: T, ms: number} | {ok: false, reason: string, error: any, ms: number}>}
 */
export async function withDeadline(work, ms, { outer, now = () => Date.now() } = {}) {
    const started = now();
    const controller = new AbortController();
    let timer = null;
    let onOuterAbort = null;
    const deadline = new Promise(resolve => {
        timer = setTimeout(() => {
            controller.abort(new TimeoutError(ms));
            resolve({ ok: false, reason: 'timeout', error: new TimeoutError(ms) });
        }, Math.max(0, ms));
        if (outer) {
            onOuterAbort = () => {
                controller.abort(outer.reason);
                resolve({ ok: false, reason: 'aborted', error: outer.reason });
            };
            if (outer.aborted) onOuterAbort();
            else outer.addEventListener('abort', onOuterAbort, { once: true });
        }
    });
    let running;
    try {
        running = Promise.resolve(work(controller.signal)).then(
            value => ({ ok: true, value }),
            error => ({ ok: false, reason: controller.signal.aborted ? 'timeout' : 'error', error }),
        );
    } catch (error) {
        running = Promise.resolve({ ok: false, reason: 'error', error });
    }
    const result = await Promise.race([running, deadline]);
    clearTimeout(timer);
    if (outer && onOuterAbort) outer.removeEventListener('abort', onOuterAbort);
    return { ...result, ms: now() - started };
}

/**
 * Tells the user about an outage once, not on every generation: `failed()` returns true only for the
 * first failure after a success (or ever), `succeeded()` returns true when an outage just ended.
 */
export class OutageNotifier {
    constructor() {
        this.down = false;
        this.since = null;
        this.lastReason = null;
    }

    /**
     * Record a failure.
     * @param {string} [reason]
     * @param {number} [at] timestamp
     * @returns {boolean} true when the user should be told (first failure of this outage)
     */
    failed(reason = '', at = Date.now()) {
        this.lastReason = reason;
        if (this.down) return false;
        this.down = true;
        this.since = at;
        return true;
    }

    /**
     * Record a success.
     * @returns {boolean} true when this ends an outage (tell the user memory is back)
     */
    succeeded() {
        const wasDown = this.down;
        this.down = false;
        this.since = null;
        this.lastReason = null;
        return wasDown;
    }
}

/**
 * Reconnect delay with exponential backoff and jitter.
 * @param {number} attempt 0 for the first retry
 * @param {{base?: number, max?: number, random?: () => number}} [options]
 * @returns {number} milliseconds
 */
export function backoffDelay(attempt, { base = 1000, max = 30000, random = Math.random } = {}) {
    const exp = Math.min(max, base * 2 ** Math.max(0, attempt));
    // Full jitter on the upper half keeps many tabs from reconnecting in lockstep.
    return Math.round(exp / 2 + random() * (exp / 2));
}

/**
 * Advice the user can act on for a failed sidecar call.
 * @param {{reason?: string, error?: any}} failure a `withDeadline` result or an error wrapper
 * @param {{url?: string, mode?: string}} [where]
 * @returns {string}
 */
export function adviceFor(failure, { url = '', mode = 'direct' } = {}) {
    const status = failure?.error?.status;
    if (failure?.reason === 'timeout') {
        return `The memory sidecar did not answer in time${url ? ` at ${url}` : ''}. Is it busy loading its model? ` +
            'The chat goes on without memory; raise the timeout in the ST-BME settings if this repeats.';
    }
    if (status === 401 || status === 403) {
        return 'The memory sidecar refused the request: set its API token in the ST-BME settings ' +
            '(needed when the sidecar listens on a LAN address).';
    }
    if (status === 404 && mode === 'proxy') {
        return 'The ST-BME proxy plugin is not installed or not enabled: copy server-plugin to SillyTavern\'s ' +
            'plugins folder, set enableServerPlugins: true in config.yaml and restart SillyTavern.';
    }
    if (typeof status === 'number' && status >= 500) {
        return `The memory sidecar failed (${status}): see its console. The chat goes on without memory.`;
    }
    return `Cannot reach the memory sidecar${url ? ` at ${url}` : ''}. Start it with "stbme serve", check the URL in ` +
        'the ST-BME settings, or pick "Through SillyTavern (plugin)" when you open ST from another device. ' +
        'The chat goes on without memory.';
}
