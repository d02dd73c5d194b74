// SillyTavern's chat events. ST awaits every listener in turn (eventemitter.js `emit`), so each one returns
// at once: network work is scheduled, never awaited. Owns: the outcome of the last "delete memories too?" offer.

import { LOG, confirmPopup, ctx, eventTypes, toast } from './st.js';

const MESSAGE_EVENTS = ['MESSAGE_SENT', 'MESSAGE_RECEIVED', 'MESSAGE_EDITED', 'MESSAGE_DELETED', 'MESSAGE_SWIPED', 'MESSAGE_UPDATED'];

/**
 * @param {object} deps
 * @param {ReturnType<import('../lib/settings.js').getSettings>} deps.settings
 * @param {ReturnType<import('./connection.js').createConnection>} deps.connection
 * @param {ReturnType<import('./chat_sync.js').createChatSync>} deps.chatSync
 * @param {() => void} deps.onChatChanged reset what belongs to the previous chat and load the new one's
 * @param {() => void} [deps.onMessagesChanged] a message was edited, deleted or swiped (message numbers may have moved)
 */
export function createChatEvents({ settings, connection, chatSync, onChatChanged, onMessagesChanged = () => {} }) {
    /** @type {{chatId: string, outcome: 'deleted'|'kept'|'nothing'|'failed'} | null} */
    let lastDeleteOffer = null;

    function onMessageEvent(_messageId, type) {
        if (type === 'quiet') return;
        chatSync.schedule();
    }

    function onMessageChanged(messageId, type) {
        onMessageEvent(messageId, type);
        onMessagesChanged();
    }

    async function offerDeleteMemories(chatId) {
        chatSync.forget(chatId);
        const settle = outcome => { lastDeleteOffer = { chatId, outcome }; };
        if (!settings.enabled) return settle('nothing');
        let status;
        try {
            status = await connection.client.status(chatId);
        } catch {
            return settle('nothing'); // unknown to the sidecar, or it is down: nothing to offer
        }
        if (!status || (!status.nodes && !status.messages)) return settle('nothing');
        const question = `The chat "${chatId}" was deleted. Also delete its ${status.nodes} memories in the sidecar?`;
        const yes = settings.confirmChatDelete ? await confirmPopup(question) : true;
        if (!yes) return settle('kept');
        try {
            await connection.client.deleteChat(chatId);
            toast('info', `Deleted the memories of "${chatId}".`);
            settle('deleted');
        } catch (error) {
            toast('error', `Could not delete the memories: ${error.message}`);
            settle('failed');
        }
    }

    /** CHAT_DELETED passes the chat file name without .jsonl, GROUP_CHAT_DELETED the group chat id. */
    function onChatDeleted(chatId) {
        if (!chatId) return;
        offerDeleteMemories(String(chatId)).catch(error => console.error(LOG, error));
    }

    return {
        /** Listen to ST's chat events. */
        register() {
            const c = ctx();
            const et = eventTypes();
            for (const name of MESSAGE_EVENTS) {
                const changes = ['MESSAGE_EDITED', 'MESSAGE_DELETED', 'MESSAGE_SWIPED'].includes(name);
                if (et[name]) c.eventSource.on(et[name], changes ? onMessageChanged : onMessageEvent);
            }
            c.eventSource.on(et.CHAT_CHANGED, onChatChanged);
            if (et.CHAT_DELETED) c.eventSource.on(et.CHAT_DELETED, onChatDeleted);
            if (et.GROUP_CHAT_DELETED) c.eventSource.on(et.GROUP_CHAT_DELETED, onChatDeleted);
        },

        /** What happened after the last chat deletion: its memories deleted, kept, or nothing to ask. */
        get lastDeleteOffer() { return lastDeleteOffer; },
    };
}
