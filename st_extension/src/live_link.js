// The live channel to the sidecar: progress, notices, job results and LLM relay requests. Direct route:
// a WebSocket; through ST's plugin (no WebSocket upgrade there): the same messages by long-poll, plus a
// chat status poll for the progress line. Owns: both channels, the progress text, the status poll timer.

import { LiveChannel } from '../lib/live.js';
import { LongPollChannel } from '../lib/longpoll.js';
import { progressText, timeLeft } from '../lib/progress.js';
import { LOG, currentChatId, toast } from './st.js';

const PROXY_POLL_MS = 5000;
/** Seconds one long-poll may wait at the sidecar (the proxy plugin allows 120 s by default). */
const LONG_POLL_S = 20;

/**
 * @param {object} deps
 * @param {ReturnType<import('../lib/settings.js').getSettings>} deps.settings
 * @param {ReturnType<import('./connection.js').createConnection>} deps.connection
 * @param {string} deps.version sent in the WebSocket hello
 * @param {(request: object) => Promise<object>} deps.relay runs a relay_request, resolves with the relay_response
 * @param {(chatId: string) => void} deps.onJobDone a job of that chat finished (refresh what shows memories)
 * @param {() => void} deps.onChange the channel state or progress text changed
 * @param {(message: object) => void} [deps.onProgress] a progress message arrived
 * @param {(chatId: string, status: object) => void} [deps.onStatus] the open chat's status was polled (proxy route)
 */
export function createLiveLink({ settings, connection, version, relay, onJobDone, onChange, onProgress = () => {}, onStatus = () => {} }) {
    let progress = '';
    let pollTimer = null;
    const setProgress = text => {
        progress = text;
        onChange();
    };

    function onMessage(message) {
        switch (message.type) {
            case 'hello':
                console.debug(LOG, 'live channel connected to sidecar', message.version);
                break;
            case 'progress': {
                const { task = 'work', done = 0, total = 0, eta_s: eta } = message;
                onProgress(message);
                if (message.chat_id && message.chat_id !== currentChatId()) break;
                const pct = total ? Math.round((done / total) * 100) : 0;
                if (task === 'extract') setProgress(message.working === false ? '' : progressText(message));
                else setProgress(done >= total && total ? '' : `${task}: ${done}/${total} (${pct}%)${timeLeft(eta) ? `, ${timeLeft(eta)}` : ''}`);
                break;
            }
            case 'notice': {
                const level = ['info', 'warning', 'error'].includes(message.level) ? message.level : 'info';
                if (message.chat_id && message.chat_id !== currentChatId() && level === 'info') break;
                if (level === 'info') setProgress(message.message ?? '');
                else toast(level, message.message ?? 'notice from the memory sidecar');
                break;
            }
            case 'relay_request':
                // llm.mode = relay: run the memory task on the user's current ST connection, answer on the channel.
                relay(message).then(reply => channel()?.send(reply));
                break;
            case 'job':
                if (message.state === 'failed') toast('error', `Memory processing failed: ${message.error ?? 'unknown error'}. The chat is unaffected.`);
                if (message.chat_id === currentChatId()) {
                    setProgress('');
                    onJobDone(message.chat_id);
                }
                break;
            default:
                break;
        }
    }

    const socket = new LiveChannel({
        url: () => (connection.client.route === 'direct' ? connection.client.wsUrl() : null),
        onMessage,
        onState: onChange,
        version,
    });
    const longPoll = new LongPollChannel({
        post: (path, body, { signal }) => connection.client.post(path, body, { signal, timeoutMs: (LONG_POLL_S + 15) * 1000 }),
        onMessage,
        onState: onChange,
        waitS: LONG_POLL_S,
    });

    /** The channel in use: the WebSocket on the direct route, the long-poll through the proxy. */
    function channel() {
        return connection.client?.route === 'proxy' ? longPoll : socket;
    }

    async function pollStatus() {
        const chatId = currentChatId();
        if (!chatId) return;
        const status = await connection.client.status(chatId);
        if (currentChatId() !== chatId) return;
        onStatus(chatId, status);
        const pending = status.jobs?.pending ?? 0;
        let text = pending || status.progress?.working ? progressText(status.progress) : '';
        if (status.jobs?.last_error && status.jobs?.failed) text = `Last job failed: ${status.jobs.last_error}`;
        setProgress(text);
    }

    return {
        /** Open the channel the route needs and close the other (after a health check or a settings change). */
        update() {
            const wanted = settings.enabled && settings.liveChannel;
            const route = connection.client.route;
            if (wanted && route === 'direct') socket.start();
            else socket.stop();
            const wantPoll = wanted && route === 'proxy';
            if (wantPoll) longPoll.start();
            else longPoll.stop();
            if (wantPoll && !pollTimer) {
                pollTimer = setInterval(() => { pollStatus().catch(() => {}); }, PROXY_POLL_MS);
            } else if (!wantPoll && pollTimer) {
                clearInterval(pollTimer);
                pollTimer = null;
            }
        },

        /** Reconnect the channels that run (the URL or token changed). */
        restart() {
            socket.restart();
            if (!longPoll.stopped) longPoll.restart();
        },

        /** Memory was turned off. */
        stop() {
            socket.stop();
            longPoll.stop();
            clearInterval(pollTimer);
            pollTimer = null;
        },

        /** The chat changed: its progress line no longer applies. */
        clearProgress() {
            progress = '';
        },

        get progress() { return progress; },
        /** @returns {{route: 'websocket'|'long-poll', state: 'connecting'|'open'|'closed'}} */
        get state() {
            const c = channel();
            return { route: c === longPoll ? 'long-poll' : 'websocket', state: c.state };
        },
    };
}
