// Live channel over HTTP long-poll (POST /v1/live/poll + /v1/live/send), for the route through
// SillyTavern's proxy plugin, which cannot carry a WebSocket. Same interface as LiveChannel: start(),
// stop(), restart(), send(message), onMessage, onState. Pure module: the HTTP call and the timers are injected.

import { backoffDelay } from './failopen.js';

export class LongPollChannel {
    /**
     * @param {object} options
     * @param {(path: string, body: object, options: {signal: AbortSignal}) => Promise<any>} options.post
     *   POST JSON to the sidecar (through the proxy) and return the parsed answer; throws on failure
     * @param {(message: object) => void} options.onMessage every message from the server
     * @param {(state: 'connecting'|'open'|'closed') => void} [options.onState]
     * @param {boolean} [options.relay] offer this tab for llm.mode = relay
     * @param {number} [options.waitS] how long one poll may wait on the server, in seconds
     * @param {string} [options.clientId] stable id of this tab's session (random by default)
     * @param {{base?: number, max?: number, random?: () => number}} [options.backoff]
     * @param {{setTimeout: Function}} [options.timers]
     */
    constructor({ post, onMessage, onState = () => {}, relay = true, waitS = 20, clientId, backoff = {}, timers = globalThis }) {
        this.post = post;
        this.onMessage = onMessage;
        this.onState = onState;
        this.relay = relay;
        this.waitS = waitS;
        this.clientId = clientId ?? `st-${Math.random().toString(36).slice(2)}${Date.now().toString(36)}`;
        this.backoff = backoff;
        this.timers = timers;
        this.stopped = true;
        this.state = 'closed';
        this.attempt = 0;
        this.controller = null;
        this.loop = null;
    }

    start() {
        if (!this.stopped) return;
        this.stopped = false;
        this.loop = this.run();
    }

    stop() {
        this.stopped = true;
        this.controller?.abort();
        this.setState('closed');
    }

    restart() {
        this.stop();
        this.start();
    }

    setState(state) {
        if (this.state === state) return;
        this.state = state;
        try { this.onState(state); } catch { /* a UI error must not kill the channel */ }
    }

    async run() {
        this.setState('connecting');
        while (!this.stopped) {
            this.controller = new AbortController();
            try {
                const answer = await this.post('/v1/live/poll',
                    { client_id: this.clientId, wait_s: this.waitS, relay: this.relay },
                    { signal: this.controller.signal });
                if (this.stopped) return;
                this.attempt = 0;
                this.setState('open');
                for (const message of Array.isArray(answer?.messages) ? answer.messages : []) {
                    if (message && typeof message === 'object') {
                        try { this.onMessage(message); } catch (error) { console.error('ST-BME: live message handler failed', error); }
                    }
                }
            } catch {
                if (this.stopped) return;
                this.setState('closed');
                await new Promise(resolve => this.timers.setTimeout(resolve, backoffDelay(this.attempt++, this.backoff)));
            }
        }
    }

    /**
     * Send a message (a relay_response, a ping). Fire and forget, like a WebSocket send.
     * @param {object} message
     * @returns {boolean} queued
     */
    send(message) {
        if (this.stopped) return false;
        this.post('/v1/live/send', { client_id: this.clientId, message }, {}).catch(error => {
            console.error('ST-BME: could not send on the live channel', error);
        });
        return true;
    }
}
