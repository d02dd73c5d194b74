// The sidecar's memory settings as the extension knows them: the schema (GET /v1/settings/schema), the
// global values, the open chat's effective values and overrides, and which of them the panel edits.
// The sidecar validates every change. Owns: schema, global values, chat values, scope.

import { currentChatId } from './st.js';

/**
 * @param {object} deps
 * @param {ReturnType<import('./connection.js').createConnection>} deps.connection
 * @param {(settings: Record<string, any>) => void} deps.onGlobalLoaded the global values arrived
 * @param {() => void} deps.onSchemaLoaded draw the controls
 * @param {() => void} deps.onValuesChanged show the values again
 */
export function createSidecarSettings({ connection, onGlobalLoaded, onSchemaLoaded, onValuesChanged }) {
    let schema = null;
    let globalValues = null;
    /** @type {{chatId: string, settings: Record<string, any>, overrides: Record<string, any>} | null} */
    let chat = null;
    /** @type {'global'|'chat'} */
    let scope = 'global';

    /**
     * Load a chat's effective settings and overrides.
     * @param {string} chatId
     * @param {{render?: boolean}} [options] render: show them when the panel edits this chat
     */
    async function loadChat(chatId, { render = true } = {}) {
        const data = await connection.client.getChatSettings(chatId);
        if (currentChatId() !== chatId) return null;
        chat = { chatId, settings: data.settings ?? {}, overrides: data.overrides ?? {} };
        if (render && scope === 'chat') onValuesChanged();
        return chat;
    }

    return {
        get schema() { return schema; },
        get scope() { return scope; },
        loadChat,

        /** Schema, global values and the open chat's values, then draw. */
        async load() {
            const [s, global] = await Promise.all([connection.client.schema(), connection.client.getSettings()]);
            schema = s.settings ?? [];
            globalValues = global.settings ?? {};
            onGlobalLoaded(globalValues);
            const chatId = currentChatId();
            if (chatId) await loadChat(chatId).catch(() => {});
            onSchemaLoaded();
        },

        /** Another sidecar: its schema may differ. */
        forgetSchema() {
            schema = null;
        },

        /** The chat changed: its values are not known yet. */
        forgetChat() {
            chat = null;
        },

        /** @returns {boolean} the open chat's values are loaded */
        hasChat(chatId) {
            return chat?.chatId === chatId;
        },

        /**
         * The settings recall and injection use for a chat: its effective ones when loaded, else the global ones.
         * @param {string} chatId
         */
        effective(chatId) {
            if (chat?.chatId === chatId) return chat.settings;
            return globalValues ?? {};
        },

        /** @param {'global'|'chat'} value */
        setScope(value) {
            scope = value === 'chat' ? 'chat' : 'global';
        },

        /**
         * What the panel shows now: this chat's values when editing this chat, else the global ones.
         * @returns {{chatId: string|null, values: Record<string, any>, overrides: Record<string, any>}}
         */
        view() {
            const chatId = currentChatId();
            if (scope === 'chat' && chatId && chat?.chatId === chatId) return { chatId, values: chat.settings, overrides: chat.overrides };
            return { chatId: null, values: globalValues ?? {}, overrides: {} };
        },

        /**
         * Save one setting (for the open chat in chat scope, else for all chats); the sidecar validates.
         * @param {string} name
         * @param {any} value null removes this chat's override
         */
        async save(name, value) {
            const chatId = currentChatId();
            if (scope === 'chat' && chatId) {
                const res = await connection.client.putChatSettings(chatId, { [name]: value });
                chat = { chatId, settings: res.settings ?? {}, overrides: res.overrides ?? {} };
                if (!res.overrides) await loadChat(chatId, { render: false });
            } else {
                const res = await connection.client.putSettings({ [name]: value });
                globalValues = res.settings ?? globalValues;
                if (chatId) await loadChat(chatId, { render: false }).catch(() => {});
            }
        },
    };
}
