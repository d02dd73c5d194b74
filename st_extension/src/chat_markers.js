// Memory you can see in the chat: a faint brain after the time of each remembered message (in the name
// line, where ST's own .mes_ghost marks a hidden message), in the theme's quote colour when the message fed
// the memory block of the last reply; a click shows the memories behind it in ST's popup. ST draws
// messages in many ways (printMessages, addOneMessage, a swipe, a deletion that renumbers them), so the
// markers follow #chat's elements with a MutationObserver and the data follows the sidecar.
// Owns: the remembered counts of the open chat, the observer, the refresh in flight.

import { markFor, markTitle, rememberedMessages, usedMessages } from '../lib/chat_marks.js';
import { memoryRow, rangeLabel, typeLabel } from '../lib/memory_view.js';
import { singleFlight } from '../lib/single_flight.js';
import { $id, h } from './dom.js';
import { LOG, ctx, currentChatId, toast } from './st.js';

const REFRESH_DELAY_MS = 250;
const DECORATE_DELAY_MS = 30;
/** The sidecar answers at most this many messages at once (usecases/memories.py MAX_MESSAGE_SPAN). */
const MAX_SPAN = 2000;

/**
 * @param {object} deps
 * @param {ReturnType<import('../lib/settings.js').getSettings>} deps.settings
 * @param {ReturnType<import('./connection.js').createConnection>} deps.connection
 * @param {() => object|null} deps.lastInjection
 */
export function createChatMarkers({ settings, connection, lastInjection }) {
    /** @type {{chatId: string|null, remembered: Map<number, number>}} */
    let data = { chatId: null, remembered: new Map() };
    /** The injection whose message numbers an edit, deletion or swipe has made stale (not lit any more). */
    let staleInjectionAt = null;
    let timer = null;
    let observer = null;
    let frame = null;

    const on = () => settings.enabled && settings.chatMarkers;

    /** The used messages of the last injection, when it was for the open chat. */
    function used(chatId) {
        const inj = lastInjection();
        const current = inj?.status === 'injected' && inj.chatId === chatId && inj.at !== staleInjectionAt;
        return current ? usedMessages(inj.memories) : new Map();
    }

    /** The mesid range ST shows now. */
    function shownRange() {
        const ids = [...document.querySelectorAll('#chat .mes[mesid]')].map(el => Number(el.getAttribute('mesid'))).filter(Number.isInteger);
        if (!ids.length) return null;
        const last = Math.max(...ids);
        return [Math.max(Math.min(...ids), last - MAX_SPAN + 1), last];
    }

    /** Put, update or take away each shown message's marker from what is known; changes only what differs. */
    function decorate() {
        const chatId = currentChatId();
        const known = on() && data.chatId === chatId;
        const inBlock = known ? used(chatId) : new Map();
        for (const mes of document.querySelectorAll('#chat .mes[mesid]')) {
            const index = Number(mes.getAttribute('mesid'));
            const mark = known ? markFor(index, data.remembered, inBlock) : { state: null, memories: 0, used: 0 };
            let marker = mes.querySelector('.stbme_mes_marker');
            if (!mark.state) {
                marker?.remove();
                continue;
            }
            if (!marker) {
                marker = h('i', { class: 'stbme_mes_marker fa-solid fa-brain', role: 'button', tabindex: 0 });
                const anchor = mes.querySelector('.ch_name .timestamp') ?? mes.querySelector('.ch_name .name_text');
                if (anchor) anchor.after(marker);
                else (mes.querySelector('.mes_block') ?? mes).prepend(marker);
            }
            const title = markTitle(mark);
            if (marker.title !== title) {
                marker.title = title;
                marker.setAttribute('aria-label', title);
            }
            if (marker.dataset.state !== mark.state) {
                marker.dataset.state = mark.state;
                marker.classList.toggle('stbme_used', mark.state === 'used');
            }
        }
    }

    async function load() {
        const chatId = currentChatId();
        const range = shownRange();
        if (!on() || !chatId || !range) return;
        const answer = await connection.client.rememberedMessages(chatId, range[0], range[1]);
        if (currentChatId() !== chatId) return;
        data = { chatId, remembered: rememberedMessages(answer) };
        decorate();
    }

    /** Load the open chat's remembered messages now; joins the load in flight (and runs once more after it). */
    const refresh = singleFlight(async () => {
        try {
            await load();
        } catch (error) {
            if (error?.status !== 404) console.debug(LOG, 'chat markers not refreshed:', error?.message ?? error);
        }
    });

    /** The memories behind one message, in ST's popup. */
    async function open(index) {
        const chatId = currentChatId();
        if (!chatId) return;
        let answer;
        try {
            answer = await connection.client.messageMemories(chatId, index);
        } catch (error) {
            toast('warning', `Cannot show this message's memories: ${error.message}`);
            return;
        }
        if (currentChatId() !== chatId) return;
        const usedIds = new Set(lastInjection()?.chatId === chatId ? (lastInjection()?.memories ?? []).map(m => m.id) : []);
        const memories = answer.memories ?? [];
        const content = h('div', { class: 'stbme_popup stbme_message_memories', 'data-index': index }, [
            h('h3', { text: `Memories from message #${index}` }),
            memories.length
                ? h('ul', { class: 'stbme_memory_list' }, memories.map(node => {
                    const { title, text } = memoryRow(node);
                    const range = node.seq_range && node.seq_range[0] !== node.seq_range[1] ? `from ${rangeLabel(node.seq_range)}` : '';
                    return h('li', { 'data-id': node.id }, [
                        h('div', { class: 'stbme_memory_head' }, [
                            h('span', { class: 'stbme_type', text: typeLabel(node.type) }),
                            range ? h('span', { text: range }) : null,
                            node.pinned ? h('span', { text: 'pinned' }) : null,
                            usedIds.has(node.id) ? h('span', { class: 'stbme_used_tag', text: 'in the last reply’s memory block' }) : null,
                        ]),
                        title ? h('b', { text: title }) : null,
                        h('div', { text }),
                    ]);
                }))
                : h('p', { class: 'stbme_note', text: 'Nothing is remembered from this message now (its memories may be archived).' }),
            h('p', { class: 'stbme_note', text: 'Edit, pin or archive them in ST-BME Memory → Browse memories.' }),
        ]);
        const c = ctx();
        if (typeof c.callGenericPopup === 'function' && c.POPUP_TYPE) {
            await c.callGenericPopup(content, c.POPUP_TYPE.TEXT, '', { allowVerticalScrolling: true });
        } else {
            toast('info', memories.map(m => memoryRow(m).text).join('<br>') || 'Nothing remembered from this message.', { escapeHtml: false });
        }
    }

    function onActivate(event) {
        const marker = event.target?.closest?.('.stbme_mes_marker');
        if (!marker) return;
        if (event.type === 'keydown' && event.key !== 'Enter' && event.key !== ' ') return;
        event.preventDefault();
        event.stopPropagation();
        const index = Number(marker.closest('.mes')?.getAttribute('mesid'));
        if (Number.isInteger(index)) open(index).catch(error => console.error(LOG, error));
    }

    return {
        /** Follow #chat's messages (after the page has it). */
        start() {
            const chat = $id('chat');
            if (!chat || observer) return;
            // New, removed and renumbered messages; our own markers sit deeper and change no mesid. A streamed
            // reply changes #chat with every token: one pass per burst is enough.
            observer = new MutationObserver(() => {
                if (frame === null) frame = setTimeout(() => { frame = null; decorate(); }, DECORATE_DELAY_MS);
            });
            observer.observe(chat, { childList: true, subtree: true, attributes: true, attributeFilter: ['mesid'] });
            chat.addEventListener('click', onActivate, true);
            chat.addEventListener('keydown', onActivate, true);
            this.schedule();
        },

        /** Something may have changed what is remembered: refresh soon (debounced). */
        schedule() {
            clearTimeout(timer);
            timer = setTimeout(() => { timer = null; refresh(); }, REFRESH_DELAY_MS);
        },

        refresh,

        /** A new injection: relight the messages behind it. */
        onInjection() {
            decorate();
        },

        /** A message was edited, deleted or swiped: the last block's message numbers no longer hold. */
        messagesChanged() {
            staleInjectionAt = lastInjection()?.at ?? null;
            decorate();
            this.schedule();
        },

        /** The chat changed or memory was turned off: no marker until the new chat's data is in. */
        reset() {
            data = { chatId: null, remembered: new Map() };
            decorate();
            if (on()) this.schedule();
        },

        /** Open the popup of message `index` (for /memory-used style access and the tests' keyboard path). */
        open,
    };
}
