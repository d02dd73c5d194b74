// SillyTavern access: everything the extension takes from ST goes through here, from
// `SillyTavern.getContext()` (public/script.js `getContext`), so no module depends on ST's internal paths.

import { PROMPT_ROLES, PROMPT_TYPES } from '../lib/settings.js';

export const LOG = 'ST-BME:';
const TOAST_TITLE = 'ST-BME memory';

/** The extension's folder as ST serves it, e.g. /scripts/extensions/third-party/st-bme-sidecar/ */
export const BASE_URL = new URL('..', import.meta.url);
/** `renderExtensionTemplateAsync` wants the path below /scripts/extensions/, e.g. third-party/st-bme-sidecar */
export const EXTENSION_NAME = (() => {
    const m = decodeURIComponent(BASE_URL.pathname).match(/\/scripts\/extensions\/(.+?)\/?$/);
    return m ? m[1] : 'third-party/st-bme-sidecar';
})();
/** ST's web root (where script.js is), from our own URL, so a path prefix in front of ST is kept. */
export const ST_ROOT = (() => {
    const m = BASE_URL.pathname.match(/^(.*?)\/scripts\/extensions\//);
    return new URL(`${m ? m[1] : ''}/`, BASE_URL);
})();

/** ST's live context; call it each time (ST returns fresh values: chat, chatId, mainApi). */
export function ctx() {
    return globalThis.SillyTavern.getContext();
}

/** @returns {string|null} the open chat's id */
export function currentChatId() {
    const c = ctx();
    const id = typeof c.getCurrentChatId === 'function' ? c.getCurrentChatId() : c.chatId;
    return id === undefined || id === null || id === '' ? null : String(id);
}

/** ST's event names (`eventTypes`, or the legacy `event_types`). */
export function eventTypes() {
    const c = ctx();
    return c.eventTypes ?? c.event_types;
}

/** ST's enums when the context exposes them (newer ST), else the same values copied from public/script.js. */
export function promptEnums() {
    const c = ctx();
    return {
        types: c.extension_prompt_types ?? c.extensionPromptTypes ?? PROMPT_TYPES,
        roles: c.extension_prompt_roles ?? c.extensionPromptRoles ?? PROMPT_ROLES,
    };
}

/**
 * A toastr message titled for the extension; repeated messages collapse.
 * @param {'info'|'success'|'warning'|'error'} level
 * @param {string} message
 * @param {object} [options] toastr options
 */
export function toast(level, message, options = {}) {
    const t = globalThis.toastr;
    if (t && typeof t[level] === 'function') t[level](message, TOAST_TITLE, { preventDuplicates: true, ...options });
    else console.log(LOG, level, message);
}

/** Persist `extension_settings` (ST debounces the write). */
export function saveSettings() {
    ctx().saveSettingsDebounced?.();
}

/**
 * Ask a yes/no question with ST's popup (the browser's confirm on an ST without it).
 * @param {string} text
 * @returns {Promise<boolean>}
 */
export async function confirmPopup(text) {
    const c = ctx();
    if (typeof c.callGenericPopup === 'function' && c.POPUP_TYPE) {
        const result = await c.callGenericPopup(text, c.POPUP_TYPE.CONFIRM);
        return result === (c.POPUP_RESULT?.AFFIRMATIVE ?? 1);
    }
    return globalThis.confirm(text);
}

/**
 * Import one of ST's own ES modules by its path below ST's root (ST 1.12 keeps some APIs off getContext()).
 * Importing a module the page already runs returns that same instance.
 * @param {string} path e.g. 'script.js'
 */
export function importSt(path) {
    return import(new URL(path, ST_ROOT).href);
}
