// ST-BME Sidecar: long-term memory for SillyTavern chats. This is the thin browser side: it forwards the
// chat to the sidecar (sync), injects the recalled memory block before each generation, and renders the
// settings panel. All memory logic lives in the sidecar (docs/api.md).
//
// This file only wires the parts; each part owns its state and gets what it needs as arguments:
//   src/st.js                SillyTavern access (getContext, events, toasts, popups)
//   src/connection.js        HTTP client, health loop, outage notices
//   src/chat_sync.js         debounced chat sync, flushed before recall
//   src/interceptor.js       the generate interceptor: recall -> setExtensionPrompt
//   src/sidecar_settings.js  the sidecar's settings (schema, global, this chat)
//   src/settings_form.js     the schema-driven settings controls
//   src/panel.js             the panel template, the extension's own settings, buttons
//   src/status.js            status line and /memory-status text
//   src/live_link.js         live channel: WebSocket, or long-poll through the proxy
//   src/relay_runner.js      llm.mode = relay on ST's own connection
//   src/injection_view.js    "Memories used"
//   src/memory_browser.js    the memory browser
//   src/transfer.js          export, import, reindex
//   src/history.js           "Remember this chat's history now" and its progress bar
//   src/chat_markers.js      the per-message memory marker in the chat, and its popup
//   src/chat_progress.js     a long ingest's bar in the chat, above the input bar
//   src/commands.js          slash commands
//   src/chat_events.js       ST's chat events
// Pure logic (hashing, sync protocol, HTTP client, settings mapping) lives in lib/ and is unit-tested.

import { getSettings } from './lib/settings.js';
import { createChatEvents } from './src/chat_events.js';
import { createChatMarkers } from './src/chat_markers.js';
import { createChatProgress } from './src/chat_progress.js';
import { createChatSync } from './src/chat_sync.js';
import { registerCommands } from './src/commands.js';
import { createConnection } from './src/connection.js';
import { createHistory } from './src/history.js';
import { createInjectionView } from './src/injection_view.js';
import { clearSlot, createInterceptor } from './src/interceptor.js';
import { createLiveLink } from './src/live_link.js';
import { createMemoryBrowser } from './src/memory_browser.js';
import { createPanel } from './src/panel.js';
import { createRelayRunner } from './src/relay_runner.js';
import { createSettingsForm } from './src/settings_form.js';
import { createSidecarSettings } from './src/sidecar_settings.js';
import { EXTENSION_NAME, LOG, ctx, currentChatId } from './src/st.js';
import { createStatus } from './src/status.js';
import { createTransfer } from './src/transfer.js';

const VERSION = '0.1.0';
/** Name of the generate interceptor (manifest.json `generate_interceptor`). */
const INTERCEPTOR = 'stbme_generateInterceptor';

/** Build the parts once and connect them. */
function start() {
    const settings = getSettings(ctx().extensionSettings);
    // The parts that draw are built after the parts that change; callbacks run only after start() returns.
    const redraw = () => status.render();

    const connection = createConnection({
        settings,
        onChange: redraw,
        onHealthy: (_health, firstContact) => {
            if (firstContact || !sidecarSettings.schema) sidecarSettings.load().catch(() => {});
            live.update();
        },
        onClientReplaced: () => {
            chatSync.forgetAcknowledged();
            sidecarSettings.forgetSchema();
            live.restart();
        },
    });
    const chatSync = createChatSync({ settings, connection, onSynced: () => { redraw(); markers.schedule(); } });
    const browser = createMemoryBrowser({ connection });
    const lastInjection = () => interceptor.last;
    const markers = createChatMarkers({ settings, connection, lastInjection });
    const chatProgress = createChatProgress({ connection, followedInPanel: chatId => history.running === chatId });
    const sidecarSettings = createSidecarSettings({
        connection,
        onGlobalLoaded: global => chatSync.limitChunk(Number(global['server.max_sync_messages'])),
        onSchemaLoaded: () => settingsForm.render(),
        onValuesChanged: () => settingsForm.renderValues(),
    });
    const settingsForm = createSettingsForm({ sidecarSettings });
    const history = createHistory({
        connection, chatSync,
        onDone: () => { browser.refreshIfOpen(); markers.schedule(); },
        onProgress: (chatId, progress) => chatProgress.update(chatId, progress),
    });
    const live = createLiveLink({
        settings, connection, version: VERSION, relay: createRelayRunner(),
        onJobDone: () => { browser.refreshIfOpen(); markers.schedule(); },
        onChange: redraw,
        onProgress: message => {
            history.onProgress(message);
            if (message?.task === 'extract') {
                chatProgress.update(message.chat_id, message);
                markers.schedule();
            }
        },
        onStatus: (chatId, status) => chatProgress.update(chatId, status.progress),
    });
    const interceptor = createInterceptor({
        settings, connection, chatSync, sidecarSettings,
        onInjection: () => { injectionView.render(); markers.onInjection(); },
    });
    const injectionView = createInjectionView({ lastInjection });
    const status = createStatus({ settings, connection, live, chatSync, lastInjection });
    const transfer = createTransfer({ connection, onImported: () => browser.refreshIfOpen() });
    const panel = createPanel({
        settings, connection, live, chatSync, sidecarSettings, settingsForm, browser, transfer, history, clearSlot,
        redraw: () => {
            status.render();
            injectionView.render();
        },
        onShowChanged: () => markers.reset(),
    });
    const chatEvents = createChatEvents({
        settings, connection, chatSync,
        onMessagesChanged: () => markers.messagesChanged(),
        onChatChanged: () => {
            clearSlot();
            interceptor.reset();
            sidecarSettings.forgetChat();
            live.clearProgress();
            history.reset();
            browser.reset();
            markers.reset();
            chatProgress.reset();
            const chatId = currentChatId();
            if (chatId && settings.enabled) {
                sidecarSettings.loadChat(chatId).catch(() => {});
                chatSync.schedule({ force: true, delay: 50 });
                browser.refreshIfOpen();
            }
            status.render();
        },
    });
    return { settings, connection, chatSync, interceptor, injectionView, live, status, panel, chatEvents, sidecarSettings, browser, markers };
}

/** @type {ReturnType<typeof start> | null} */
let parts = null;

async function init() {
    parts = start();
    const { settings, connection, chatSync, interceptor, injectionView, status, panel, chatEvents, sidecarSettings, browser, markers } = parts;
    chatEvents.register();
    try {
        await panel.render();
    } catch (error) {
        console.error(LOG, 'cannot render the settings panel', error);
    }
    injectionView.addMenuButton();
    markers.start();
    await registerCommands({
        connection,
        statusText: () => status.text(),
        lastInjection: () => interceptor.last,
        openInjection: () => injectionView.open(),
        onRemembered: () => browser.refreshIfOpen(),
    });
    connection.start();
    const chatId = currentChatId();
    if (chatId && settings.enabled) {
        sidecarSettings.loadChat(chatId).catch(() => {});
        chatSync.schedule({ force: true, delay: 50 });
    }
    console.log(LOG, `loaded ${VERSION} from ${EXTENSION_NAME}`);
}

// ST calls the interceptor by this global name; before init it does nothing.
globalThis[INTERCEPTOR] = (...args) => parts?.interceptor.intercept(...args);

const copy = value => (value == null ? null : structuredClone(value));

/**
 * Read-only view for tests and debugging (the console: `stbme.debug.connection`). Copies, never internals.
 */
globalThis.stbme = Object.freeze({
    version: VERSION,
    debug: Object.freeze({
        /** 'unknown' | 'ok' | 'proxy' | 'down' | 'off' */
        get connection() { return parts?.connection.status ?? 'unknown'; },
        /** {route: 'websocket'|'long-poll', state: 'connecting'|'open'|'closed'} */
        get live() { return parts ? parts.live.state : null; },
        /** What the last generation got from memory: {status, at, chatId, text, memories, ...} or null. */
        get lastInjection() { return copy(parts?.interceptor.last); },
        /** The sidecar's answer to the last sync: {chatId, at, stored_length, processed_upto, ...} or null. */
        get lastSync() { return copy(parts?.chatSync.lastSync); },
        /** After a chat was deleted: {chatId, outcome: 'deleted'|'kept'|'nothing'|'failed'} or null. */
        get lastDeleteOffer() { return copy(parts?.chatEvents.lastDeleteOffer); },
    }),
});

if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', () => init().catch(e => console.error(LOG, e)));
else init().catch(e => console.error(LOG, e));
