// "Remember this chat's history now": make sure the sidecar holds the whole open chat, ask it to process
// every message now, and show a progress bar fed by the live channel's progress messages and by the chat
// status (polled, which works on every route and says when the work is done). Owns: the run in progress,
// its poll timer, the bar.

import { progressFraction, progressText } from '../lib/progress.js';
import { $id } from './dom.js';
import { currentChatId, toast } from './st.js';

const POLL_MS = 2000;

/**
 * @param {object} deps
 * @param {ReturnType<import('./connection.js').createConnection>} deps.connection
 * @param {ReturnType<import('./chat_sync.js').createChatSync>} deps.chatSync
 * @param {() => void} deps.onDone the chat's memories changed (refresh what shows them)
 * @param {(chatId: string, progress: object) => void} [deps.onProgress] the followed run's progress (the chat's own bar)
 */
export function createHistory({ connection, chatSync, onDone, onProgress = () => {} }) {
    /** @type {{chatId: string, timer: any} | null} */
    let run = null;

    function draw(source) {
        if (run?.chatId || currentChatId()) onProgress(run?.chatId ?? currentChatId(), source);
        const box = $id('stbme_history');
        const bar = $id('stbme_history_bar');
        const text = $id('stbme_history_text');
        if (!box || !bar || !text) return;
        box.hidden = false;
        bar.max = 1;
        bar.value = progressFraction(source);
        text.textContent = progressText(source);
    }

    function stop() {
        if (run) clearInterval(run.timer);
        run = null;
    }

    function finish(status) {
        stop();
        if (status.jobs?.failed && status.jobs?.last_error) {
            toast('error', `Remembering this chat failed: ${status.jobs.last_error}. It is retried on the next message.`);
        } else {
            toast('success', `This chat's history is remembered: ${status.progress?.messages?.done ?? 0} messages, ${status.nodes ?? 0} memories.`);
        }
        onDone();
    }

    async function poll() {
        const chatId = run?.chatId;
        if (!chatId) return;
        let status;
        try {
            status = await connection.client.status(chatId);
        } catch {
            return; // the next poll tries again; the connection's own health loop reports an outage
        }
        if (run?.chatId !== chatId) return;
        if (currentChatId() !== chatId) {
            stop();
            return;
        }
        draw(status.progress);
        if (!status.jobs?.pending && !status.progress?.working) finish(status);
    }

    return {
        /** The button: sync the whole chat, have it processed now, follow the progress. */
        async start() {
            const chatId = currentChatId();
            if (!chatId) throw new Error('Open a chat first.');
            if (run?.chatId === chatId) return;
            stop();
            await chatSync.run();
            if (currentChatId() !== chatId) return;
            const res = await connection.client.process(chatId);
            draw(res.progress);
            run = { chatId, timer: setInterval(() => { poll().catch(() => {}); }, POLL_MS) };
            await poll();
        },

        /** A live `progress` message: move the bar while a run of the open chat is followed. */
        onProgress(message) {
            if (message?.task !== 'extract' || !run || message.chat_id !== run.chatId) return;
            draw(message);
        },

        /** The chat changed: its bar no longer applies. */
        reset() {
            stop();
            const box = $id('stbme_history');
            if (box) box.hidden = true;
        },

        /** The chat whose history is being followed, or null. */
        get running() { return run?.chatId ?? null; },
    };
}
