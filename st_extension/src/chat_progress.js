// A long ingest shown in the chat itself, without opening the Extensions drawer: a slim bar above ST's
// input bar (#form_sheld, inside #sheld) while the open chat has many messages or memories still to do,
// and one toast when it is done. Fed by the live channel's progress and by the chat status polls; with no
// news for a while (a busy machine embeds for long between two progress messages, or the channel dropped)
// it asks the chat status itself. Owns: the bar, whether it is up, its check timer.

import { isLongRun, progressFraction, progressText } from '../lib/progress.js';
import { $id, h } from './dom.js';
import { currentChatId, toast } from './st.js';

/** With no news for this long, the bar asks the chat status how the run stands. */
const CHECK_AFTER_MS = 20000;

/**
 * @param {object} deps
 * @param {ReturnType<import('./connection.js').createConnection>} deps.connection
 * @param {(chatId: string) => boolean} deps.followedInPanel the panel's own history bar follows this run (it toasts the end itself)
 */
export function createChatProgress({ connection, followedInPanel }) {
    /** @type {{chatId: string, shownAt: number, total: number} | null} */
    let run = null;
    let checkTimer = null;

    function bar() {
        let el = $id('stbme_chat_progress');
        if (el) return el;
        const form = $id('form_sheld');
        const sheld = $id('sheld');
        if (!form && !sheld) return null;
        el = h('div', { id: 'stbme_chat_progress', role: 'status', 'aria-live': 'polite', hidden: true }, [
            h('i', { class: 'fa-solid fa-brain', title: 'ST-BME memory' }),
            h('span', { class: 'stbme_chat_progress_text' }),
            h('progress', { max: 1, value: 0, 'aria-label': 'Remembering this chat' }),
        ]);
        if (form) form.before(el);
        else sheld.append(el);
        return el;
    }

    function hide() {
        clearTimeout(checkTimer);
        checkTimer = null;
        run = null;
        const el = $id('stbme_chat_progress');
        if (el) el.hidden = true;
    }

    /** No news for a while: the chat status says whether the run goes on (never throws). */
    async function check(chatId) {
        if (run?.chatId !== chatId) return;
        try {
            const status = await connection.client.status(chatId);
            if (run?.chatId === chatId) self.update(chatId, status.progress);
        } catch {
            if (run?.chatId === chatId) checkTimer = setTimeout(() => { check(chatId); }, CHECK_AFTER_MS);
        }
    }

    const self = {
        /**
         * News about a chat's processing: a status `progress` or a live `progress` message of task `extract`.
         * @param {string} chatId
         * @param {object} source
         */
        update(chatId, source) {
            if (!chatId || chatId !== currentChatId() || !source) return;
            const working = source.messages ? !!source.working : source.working !== false;
            if (!run) {
                if (!isLongRun(source)) return;
                run = { chatId, shownAt: Date.now(), total: 0 };
            }
            const el = bar();
            if (!el) return;
            if (!working) {
                const total = source.messages?.total ?? source.total ?? 0;
                hide();
                if (!followedInPanel(chatId)) toast('success', `This chat is remembered (${total} messages).`);
                return;
            }
            el.hidden = false;
            el.querySelector('.stbme_chat_progress_text').textContent = progressText(source);
            el.querySelector('progress').value = progressFraction(source);
            clearTimeout(checkTimer);
            checkTimer = setTimeout(() => { check(chatId); }, CHECK_AFTER_MS);
        },

        /** The chat changed: its bar no longer applies. */
        reset: hide,

        /** The chat whose long run is shown, or null. */
        get shown() { return run?.chatId ?? null; },
    };
    return self;
}
