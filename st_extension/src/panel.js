// The settings panel in ST's Extensions drawer (#extensions_settings2): the template, the extension's own
// settings (URL, route, timeouts: one binder for every `data-stbme-setting` control), the buttons, and the
// scope switch of the sidecar settings. The extension settings object is written here and nowhere else.

import { DEFAULTS, normalizeUrl } from '../lib/settings.js';
import { $id, onClick, toggleSection } from './dom.js';
import { BASE_URL, EXTENSION_NAME, LOG, ctx, currentChatId, saveSettings, toast } from './st.js';

/** Settings that need a new client (and a new first contact) when they change. */
const CLIENT_KEYS = ['sidecarUrl', 'connection', 'apiToken', 'requestTimeoutMs'];

/**
 * @param {object} deps
 * @param {ReturnType<import('../lib/settings.js').getSettings>} deps.settings
 * @param {ReturnType<import('./connection.js').createConnection>} deps.connection
 * @param {ReturnType<import('./live_link.js').createLiveLink>} deps.live
 * @param {ReturnType<import('./chat_sync.js').createChatSync>} deps.chatSync
 * @param {ReturnType<import('./sidecar_settings.js').createSidecarSettings>} deps.sidecarSettings
 * @param {ReturnType<import('./settings_form.js').createSettingsForm>} deps.settingsForm
 * @param {ReturnType<import('./memory_browser.js').createMemoryBrowser>} deps.browser
 * @param {ReturnType<import('./transfer.js').createTransfer>} deps.transfer
 * @param {ReturnType<import('./history.js').createHistory>} deps.history
 * @param {() => void} deps.clearSlot empty our prompt slot
 * @param {() => void} deps.redraw redraw the status and the last injection
 * @param {() => void} deps.onShowChanged what the chat shows changed (markers on or off, memory on or off)
 */
export function createPanel(deps) {
    const { settings, connection, live, chatSync, sidecarSettings, settingsForm, browser, transfer, history, clearSlot, redraw, onShowChanged } = deps;

    function onLocalSettingChanged(input, key) {
        const error = input.closest('.stbme_field')?.querySelector('.stbme_field_error');
        if (error) error.textContent = '';
        let value;
        if (input.type === 'checkbox') value = input.checked;
        else if (typeof DEFAULTS[key] === 'number') {
            value = Number(input.value);
            if (!Number.isFinite(value) || value < 0) {
                if (error) error.textContent = 'Enter a positive number.';
                return;
            }
        } else value = input.value;
        if (key === 'sidecarUrl') {
            value = normalizeUrl(value);
            if (!value) {
                if (error) error.textContent = 'Enter an http:// or https:// URL, e.g. http://127.0.0.1:8765';
                return;
            }
            input.value = value;
        }
        settings[key] = value;
        saveSettings();
        if (CLIENT_KEYS.includes(key)) connection.reconfigure();
        if (key === 'enabled') {
            if (!value) {
                clearSlot();
                live.stop();
                connection.turnOff();
            } else {
                chatSync.schedule({ force: true, delay: 50 });
            }
            connection.checkHealth().catch(() => {});
        }
        if (key === 'liveChannel') live.update();
        if (key === 'chatMarkers' || key === 'enabled') onShowChanged();
        redraw();
    }

    function bindLocalSettings() {
        for (const input of document.querySelectorAll('[data-stbme-setting]')) {
            const key = input.dataset.stbmeSetting;
            if (!Object.hasOwn(DEFAULTS, key)) continue;
            const value = settings[key];
            if (input.type === 'checkbox') input.checked = !!value;
            else input.value = String(value);
            input.addEventListener('change', () => onLocalSettingChanged(input, key));
        }
    }

    function bindButtons() {
        const fail = error => toast('error', error.message);
        onClick('stbme_test', async () => {
            const health = await connection.checkHealth();
            if (health) toast('success', `Connected (${connection.client.route}). Sidecar ${health.version ?? ''}, embedder ${health.embedder?.id ?? '?'}.`);
        }, fail);
        onClick('stbme_reindex', transfer.reindex, fail);
        onClick('stbme_export', transfer.exportChat, fail);
        onClick('stbme_import', () => $id('stbme_import_file')?.click(), fail);
        $id('stbme_import_file')?.addEventListener('change', event => {
            transfer.importFile(event.target).catch(error => toast('error', `Import failed: ${error.message}`));
        });
        onClick('stbme_show_used', () => toggleSection('stbme_injection_view'), fail);
        onClick('stbme_history_button', history.start, fail);
        browser.bind();
        for (const radio of document.querySelectorAll('input[name="stbme_scope"]')) {
            radio.addEventListener('change', () => {
                sidecarSettings.setScope(radio.value);
                const chatId = currentChatId();
                if (sidecarSettings.scope === 'chat' && !chatId) toast('info', 'Open a chat to edit its own settings.');
                if (sidecarSettings.scope === 'chat' && chatId && !sidecarSettings.hasChat(chatId)) {
                    sidecarSettings.loadChat(chatId).catch(fail);
                }
                settingsForm.renderValues();
            });
        }
    }

    return {
        /** Put the panel into ST's extension settings and wire it. */
        async render() {
            const container = $id('extensions_settings2') ?? $id('extensions_settings');
            if (!container) {
                console.warn(LOG, 'no #extensions_settings2 to render the panel into');
                return;
            }
            let html;
            try {
                html = await ctx().renderExtensionTemplateAsync(EXTENSION_NAME, 'settings');
            } catch {
                html = await (await fetch(new URL('settings.html', BASE_URL))).text();
            }
            const wrapper = document.createElement('div');
            wrapper.innerHTML = html;
            container.append(...wrapper.childNodes);
            bindLocalSettings();
            bindButtons();
            redraw();
        },
    };
}
