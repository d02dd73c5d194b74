// The connection to the sidecar: the HTTP client for the chosen route, the health check loop, and the
// outage state ("told the user once"). Owns: client, status, last health answer, last error.

import { ApiError, SidecarClient } from '../lib/client.js';
import { OutageNotifier, adviceFor, withDeadline } from '../lib/failopen.js';
import { LOG, ctx, toast } from './st.js';

const HEALTH_EVERY_MS = 15000;
const HEALTH_TIMEOUT_MS = 5000;

/** @typedef {'unknown'|'ok'|'proxy'|'down'|'off'} ConnectionStatus */

/**
 * @param {object} deps
 * @param {ReturnType<import('../lib/settings.js').getSettings>} deps.settings the extension's own settings (read only here)
 * @param {() => void} deps.onChange the status, health or error changed (redraw)
 * @param {(health: object, firstContact: boolean) => void} deps.onHealthy a health check answered
 * @param {() => void} deps.onClientReplaced a new client (URL, route or token changed)
 */
export function createConnection({ settings, onChange, onHealthy, onClientReplaced }) {
    /** @type {SidecarClient} */
    let client = null;
    /** @type {ConnectionStatus} */
    let status = 'unknown';
    let health = null;
    let lastError = '';
    let timer = null;
    const outage = new OutageNotifier();

    function makeClient() {
        client = new SidecarClient({
            baseUrl: settings.sidecarUrl,
            mode: settings.connection,
            token: settings.apiToken,
            timeoutMs: settings.requestTimeoutMs,
            proxyHeaders: () => ({ ...(ctx().getRequestHeaders?.() ?? {}) }),
        });
    }

    /** A call succeeded: the sidecar is up (tells the user when an outage ends). */
    function markUp() {
        const wasDown = outage.succeeded();
        status = client.route === 'proxy' ? 'proxy' : 'ok';
        if (wasDown) toast('success', 'The memory sidecar is reachable again; memory is back on.');
        onChange();
    }

    /**
     * Record a failed call; tells the user once per outage what to do.
     * @param {{reason?: string, error?: any}} failure a `withDeadline` result or `{reason, error}`
     */
    function markDown(failure) {
        const reason = failure?.reason ?? 'error';
        const error = failure?.error;
        // An HTTP 4xx other than auth means the sidecar is up; that is a bug or bad input, not an outage.
        if (error instanceof ApiError && error.status >= 400 && error.status < 500 && ![401, 403].includes(error.status) && !error.network) {
            console.warn(LOG, error.message);
            return;
        }
        status = 'down';
        const advice = adviceFor(failure, { url: settings.sidecarUrl, mode: client?.route });
        if (outage.failed(reason)) {
            console.warn(LOG, advice, error);
            toast('warning', advice, { timeOut: 12000 });
        }
        lastError = advice;
        onChange();
    }

    /** Ask /health now; never throws. @returns {Promise<object|null>} the health answer */
    async function checkHealth() {
        if (!settings.enabled) {
            status = 'off';
            onChange();
            return null;
        }
        const result = await withDeadline(signal => client.health({ signal }), HEALTH_TIMEOUT_MS);
        if (result.ok) {
            const firstContact = !health;
            health = result.value;
            markUp();
            onHealthy(health, firstContact);
            return health;
        }
        markDown(result);
        return null;
    }

    makeClient();

    return {
        /** The client for the current URL, route and token. */
        get client() { return client; },
        /** @returns {ConnectionStatus} */
        get status() { return status; },
        get health() { return health; },
        /** Advice for the last failure, shown while the sidecar is down. */
        get lastError() { return lastError; },
        /** True during an outage (recall then waits less). */
        get down() { return outage.down; },
        markUp,
        markDown,
        checkHealth,

        /** Check now and every 15 s. */
        start() {
            clearInterval(timer);
            timer = setInterval(() => { checkHealth().catch(() => {}); }, HEALTH_EVERY_MS);
            checkHealth().catch(() => {});
        },

        /** The URL, route, token or timeout changed: a new client, first contact again. */
        reconfigure() {
            makeClient();
            health = null;
            outage.succeeded();
            onClientReplaced();
            checkHealth().catch(() => {});
        },

        /** Memory was turned off in the panel. */
        turnOff() {
            status = 'off';
            onChange();
        },

        /** Words for the status, as the panel and /memory-status show them. */
        label() {
            switch (status) {
                case 'ok': return 'connected';
                case 'proxy': return 'connected through the SillyTavern plugin';
                case 'down': return 'unreachable';
                case 'off': return 'memory off';
                default: return 'checking…';
            }
        },
    };
}
