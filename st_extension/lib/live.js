// Live channel to the sidecar (GET /v1/ws): progress and notices, reconnecting with backoff.
// Pure module: the WebSocket constructor and the timers are injected so Node tests can drive it.

import { backoffDelay } from './failopen.js';

export class LiveChannel {
    /**
     * @param {object} options
     * @param {() => string|null} options.url current WebSocket URL (null: do not connect, e.g. proxy route)
     * @param {(message: object) => void} options.onMessage every JSON message from the server
     * @param {(state: 'connecting'|'open'|'closed') => void} [options.onState]
     * @param {typeof WebSocket} [options.WebSocket]
     * @param {string} [options.version] extension version sent in the hello
     * @param {number} [options.pingMs] keep-alive interval
     * @param {{base?: number, max?: number, random?: () => number}} [options.backoff]
     * @param {{setTimeout: Function, clearTimeout: Function, setInterval: Function, clearInterval: Function}} [options.timers]
     */
    constructor({ url, onMessage, onState = () => {}, WebSocket: WS, version = '', pingMs = 25000, backoff = {}, timers = globalThis }) {
        this.url = url;
        this.onMessage = onMessage;
        this.onState = onState;
        this.WS = WS ?? globalThis.WebSocket;
        this.version = version;
        this.pingMs = pingMs;
        this.backoff = backoff;
        this.timers = timers;
        this.socket = null;
        this.attempt = 0;
        this.retryTimer = null;
        this.pingTimer = null;
        this.stopped = true;
        this.state = 'closed';
    }

    /** Connect (idempotent) and keep reconnecting until `stop()`. */
    start() {
        this.stopped = false;
        if (!this.socket && !this.retryTimer) this.connect();
    }

    /** Close and stop reconnecting. */
    stop() {
        this.stopped = true;
        this.timers.clearTimeout(this.retryTimer);
        this.retryTimer = null;
        this.closeSocket();
        this.setState('closed');
    }

    /** Reconnect now (the URL or token changed). */
    restart() {
        this.attempt = 0;
        this.timers.clearTimeout(this.retryTimer);
        this.retryTimer = null;
        this.closeSocket();
        if (!this.stopped) this.connect();
    }

    setState(state) {
        if (this.state === state) return;
        this.state = state;
        try { this.onState(state); } catch { /* a UI error must not kill the channel */ }
    }

    closeSocket() {
        this.timers.clearInterval(this.pingTimer);
        this.pingTimer = null;
        const socket = this.socket;
        this.socket = null;
        if (socket) {
            socket.onopen = socket.onmessage = socket.onclose = socket.onerror = null;
            try { socket.close(); } catch { /* already closed */ }
        }
    }

    connect() {
        this.retryTimer = null;
        if (this.stopped) return;
        const url = this.url();
        if (!url || typeof this.WS !== 'function') {
            this.scheduleRetry();
            return;
        }
        this.setState('connecting');
        let socket;
        try {
            socket = new this.WS(url);
        } catch {
            this.scheduleRetry();
            return;
        }
        this.socket = socket;
        socket.onopen = () => {
            this.attempt = 0;
            this.setState('open');
            this.send({ type: 'hello', client: 'st-extension', version: this.version });
            this.timers.clearInterval(this.pingTimer);
            this.pingTimer = this.timers.setInterval(() => this.send({ type: 'ping' }), this.pingMs);
        };
        socket.onmessage = event => {
            let message;
            try {
                message = JSON.parse(typeof event.data === 'string' ? event.data : String(event.data));
            } catch {
                return;
            }
            if (message && typeof message === 'object') {
                try { this.onMessage(message); } catch (error) { console.error('ST-BME: live message handler failed', error); }
            }
        };
        socket.onerror = () => { /* onclose follows and schedules the retry */ };
        socket.onclose = () => {
            if (this.socket !== socket) return;
            this.socket = null;
            this.timers.clearInterval(this.pingTimer);
            this.pingTimer = null;
            this.setState('closed');
            this.scheduleRetry();
        };
    }

    scheduleRetry() {
        if (this.stopped || this.retryTimer) return;
        const delay = backoffDelay(this.attempt++, this.backoff);
        this.retryTimer = this.timers.setTimeout(() => this.connect(), delay);
    }

    /**
     * Send a JSON message if connected.
     * @param {object} message
     * @returns {boolean} sent
     */
    send(message) {
        if (!this.socket || this.socket.readyState !== 1) return false;
        try {
            this.socket.send(JSON.stringify(message));
            return true;
        } catch {
            return false;
        }
    }
}
