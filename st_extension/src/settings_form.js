// The sidecar's settings in the panel, drawn from its schema: a short basic list, then "Advanced" with the
// rest in collapsed groups. One control per setting, showing the value for all chats or this chat's
// override, with the sidecar's validation error next to the field. A setting that does nothing with the
// values shown (the API URL without an API, the depth of a block not in the chat) is hidden, and so is a
// group with nothing left to show.

import { applies } from '../lib/setting_words.js';
import { controlFor, formatControlValue, labelFor, parseControlValue, splitBasicAdvanced } from '../lib/settings.js';
import { $id, h } from './dom.js';

/**
 * @param {object} deps
 * @param {ReturnType<import('./sidecar_settings.js').createSidecarSettings>} deps.sidecarSettings
 */
export function createSettingsForm({ sidecarSettings }) {
    /**
     * Changes the sidecar refused only because another setting must come first (a memory LLM API needs its
     * URL): each is sent again once that setting is saved. name -> {control, value, field, needs}
     * @type {Map<string, {control: object, value: any, field: HTMLElement, needs: string}>}
     */
    const waiting = new Map();

    /** The values as the controls show them (a choice not saved yet counts), for what applies. */
    function shownValues(values) {
        const shown = { ...values };
        for (const input of document.querySelectorAll('#stbme_sidecar_settings [data-stbme-server-setting]')) {
            const name = input.dataset.stbmeServerSetting;
            if (input.type === 'checkbox') shown[name] = input.checked;
            else if (input.tagName === 'SELECT') shown[name] = input.value;
        }
        return shown;
    }

    /** Show the stored values (global or this chat's) in the controls. @param {string} [only] just this setting */
    function renderValues(only) {
        const schema = sidecarSettings.schema;
        if (!schema) return;
        const { chatId, values, overrides } = sidecarSettings.view();
        const note = $id('stbme_scope_note');
        if (note) note.textContent = chatId ? `Editing overrides for this chat only (${chatId}). Settings without "per chat" are global.` : 'Editing settings for all chats.';
        for (const def of schema) {
            if (only && def.name !== only) continue;
            const field = document.querySelector(`.stbme_field[data-setting="${CSS.escape(def.name)}"]`);
            if (!field) continue;
            const control = controlFor(def);
            const input = field.querySelector('[data-stbme-server-setting]');
            const value = formatControlValue(control, values[def.name]);
            if (input.type === 'checkbox') input.checked = !!value;
            else input.value = value;
            if (control.secret) input.placeholder = values[def.name] === '***' ? 'saved (hidden)' : '';
            const overridden = !!(chatId && Object.hasOwn(overrides, def.name));
            input.disabled = !!(chatId && !def.per_chat);
            field.classList.toggle('stbme_overridden', overridden);
            field.querySelector('.stbme_reset').hidden = !overridden;
        }
        showWhatApplies(shownValues(values));
    }

    /** Hide the fields that do nothing with these values, and the groups left empty; counts say what shows. */
    function showWhatApplies(values) {
        for (const field of document.querySelectorAll('#stbme_sidecar_settings .stbme_field[data-setting]')) {
            field.hidden = !applies(field.dataset.setting, values);
        }
        let total = 0;
        for (const group of document.querySelectorAll('#stbme_sidecar_settings details.stbme_group')) {
            const shown = group.querySelectorAll('.stbme_field[data-setting]:not([hidden])').length;
            group.hidden = shown === 0;
            const count = group.querySelector(':scope > summary .stbme_count');
            if (count) count.textContent = ` (${shown})`;
            total += shown;
        }
        const advancedCount = document.querySelector('#stbme_sidecar_settings details.stbme_advanced > summary .stbme_count');
        if (advancedCount) advancedCount.textContent = ` (${total} settings)`;
    }

    /**
     * Send one setting; the sidecar validates and its error shows by the field.
     * @param {object} control
     * @param {any} value null removes this chat's override
     * @param {HTMLElement} field
     */
    async function save(control, value, field) {
        const error = field.querySelector('.stbme_field_error');
        error.textContent = '';
        field.classList.add('stbme_saving');
        try {
            await sidecarSettings.save(control.name, value);
            waiting.delete(control.name);
            field.classList.add('stbme_saved');
            setTimeout(() => field.classList.remove('stbme_saved'), 1200);
        } catch (e) {
            if (e.field && e.field !== control.name && e.status === 400) {
                // A combination rule: say which field comes first, and send this again once it is saved.
                waiting.set(control.name, { control, value, field, needs: e.field });
                error.textContent = `Fill in “${labelFor(e.field)}” first; this is saved right after.`;
            } else {
                error.textContent = e.message;
            }
            throw e;
        } finally {
            field.classList.remove('stbme_saving');
            renderValues(control.name);
            // renderValues resets the input to the stored value; keep the rejected input visible.
            if (error.textContent) {
                const input = field.querySelector('[data-stbme-server-setting]');
                if (input && input.type !== 'checkbox' && value !== null) input.value = Array.isArray(value) ? value.join('\n') : String(value);
                showWhatApplies(shownValues(sidecarSettings.view().values));
            }
        }
        if (!error.textContent) {
            for (const [name, w] of [...waiting]) {
                if (w.needs === control.name) await save(w.control, w.value, w.field).catch(() => {});
                if (waiting.get(name) === w) waiting.delete(name);
            }
        }
    }

    function renderControl(control) {
        const id = `stbme_s_${control.name.replace(/[^a-z0-9]+/gi, '_')}`;
        let input;
        if (control.input === 'checkbox') {
            input = h('input', { type: 'checkbox', id });
        } else if (control.input === 'select') {
            input = h('select', { id, class: 'text_pole' }, control.choices.map((choice, i) => h('option', { value: choice, text: control.choiceLabels[i] })));
        } else if (control.input === 'textarea') {
            input = h('textarea', { id, class: 'text_pole textarea_compact', rows: 2, placeholder: 'one per line' });
        } else if (control.input === 'number') {
            input = h('input', { id, type: 'number', class: 'text_pole', min: control.min, max: control.max, step: control.step });
        } else {
            input = h('input', { id, type: control.input === 'password' ? 'password' : 'text', class: 'text_pole', autocomplete: 'off' });
        }
        input.dataset.stbmeServerSetting = control.name;
        const reset = h('span', { class: 'stbme_reset fa-solid fa-rotate-left', title: 'Use the value for all chats', hidden: true, role: 'button' });
        const range = control.input === 'number' && (control.min !== null || control.max !== null)
            ? ` (${control.min ?? '…'}–${control.max ?? '…'})` : '';
        const label = control.input === 'checkbox'
            ? h('label', { class: 'checkbox_label', for: id }, [input, h('span', { text: control.label })])
            : h('label', { for: id, text: control.label + range });
        const field = h('div', { class: 'stbme_field', 'data-setting': control.name }, [
            h('div', { class: 'stbme_field_head' }, [label, control.perChat ? h('small', { class: 'stbme_badge', text: 'per chat', title: 'Can differ in each chat: pick "This chat" above' }) : null, reset]),
            control.input === 'checkbox' ? null : input,
            h('small', { class: 'stbme_help', text: control.help + (control.restart ? ' (takes effect after a restart of the sidecar)' : '') }),
            h('div', { class: 'stbme_field_error', role: 'alert' }),
        ]);
        reset.addEventListener('click', () => save(control, null, field).catch(() => {}));
        input.addEventListener('change', () => {
            const raw = control.input === 'checkbox' ? input.checked : input.value;
            if (control.secret && raw === '') return;
            const parsed = parseControlValue(control, raw);
            if ('error' in parsed) {
                field.querySelector('.stbme_field_error').textContent = parsed.error;
                return;
            }
            save(control, parsed.value, field).catch(() => {});
        });
        return field;
    }

    return {
        renderValues,

        /** Draw every control from the schema (basic ones, then "Advanced"), then the values. */
        render() {
            const root = $id('stbme_sidecar_settings');
            const schema = sidecarSettings.schema;
            if (!root || !schema) return;
            const { basic, advanced } = splitBasicAdvanced(schema);
            // <details>, not a nested inline-drawer: ST's drawer toggle slides every .inline-drawer-content
            // inside the clicked drawer (script.js, '.inline-drawer-toggle' click handler), nested ones included.
            const groups = advanced.map(group => h('details', { class: 'stbme_group', 'data-group': group.group }, [
                h('summary', {}, [h('b', { text: group.title }), h('small', { class: 'stbme_help stbme_count', text: ` (${group.controls.length})` })]),
                h('div', { class: 'stbme_group_body' }, group.controls.map(renderControl)),
            ]));
            const count = advanced.reduce((n, group) => n + group.controls.length, 0);
            root.replaceChildren(h('div', { class: 'stbme_basic' }, basic.map(renderControl)));
            if (count) {
                root.append(h('details', { class: 'stbme_advanced' }, [
                    h('summary', {}, [h('b', { text: 'Advanced' }), h('small', { class: 'stbme_help stbme_count', text: ` (${count} settings)` })]),
                    h('div', { class: 'stbme_advanced_body' }, groups),
                ]));
            }
            renderValues();
        },
    };
}
