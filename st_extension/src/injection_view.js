// "Memories used": what the last generation got from memory, in the panel, in ST's popup, and as an
// entry of ST's extensions menu (the wand).

import { typeLabel } from '../lib/memory_view.js';
import { plural, recallReasons } from '../lib/wording.js';
import { $id, h } from './dom.js';
import { ctx } from './st.js';

/**
 * One line about an injection.
 * @param {object|null} inj the interceptor's last injection
 */
export function injectionSummary(inj) {
    if (!inj) return 'No reply yet in this chat.';
    const when = new Date(inj.at).toLocaleTimeString();
    switch (inj.status) {
        case 'injected': return `${when}: ${plural(inj.memories?.length ?? 0, 'memory', 'memories')}${Number.isFinite(inj.tokens) ? ` (${plural(inj.tokens, 'token')})` : ''}, found in ${inj.ms} ms`;
        case 'empty': return `${when}: nothing relevant was found${inj.reason ? ` (${inj.reason})` : ''}.`;
        case 'failed': return `${when}: generated without memory. ${inj.reason ?? ''}`;
        case 'off': return `${when}: memory is turned off.`;
        default: return String(inj.status);
    }
}

/**
 * @param {object} deps
 * @param {() => object|null} deps.lastInjection
 */
export function createInjectionView({ lastInjection }) {
    function render() {
        if (!$id('stbme_injection_view')) return;
        const inj = lastInjection();
        const list = $id('stbme_injection_list');
        list.replaceChildren();
        $id('stbme_injection_summary').textContent = injectionSummary(inj);
        $id('stbme_injection_text').textContent = inj?.text ?? '';
        // In the block's order, each with why it was chosen; the score stays in the tooltip for the curious.
        for (const m of inj?.memories ?? []) {
            list.append(h('li', { title: Number.isFinite(m.score) ? `score ${m.score.toFixed(2)}` : '' }, [
                h('span', { class: 'stbme_type', text: typeLabel(m.type ?? '') }),
                h('span', { class: 'stbme_label', text: m.label ?? m.id }),
                m.pinned ? h('span', { class: 'fa-solid fa-thumbtack', title: 'pinned' }) : null,
                h('span', { class: 'stbme_reasons', text: recallReasons(m).join(', ') }),
            ]));
        }
    }

    /** ST's popup with the block; the panel section where ST has no popup. */
    function open() {
        const c = ctx();
        const inj = lastInjection();
        if (typeof c.callGenericPopup === 'function' && c.POPUP_TYPE) {
            const content = h('div', { class: 'stbme_popup' }, [
                h('h3', { text: 'Memories used for the last reply' }),
                h('p', { text: injectionSummary(inj) }),
                inj?.text ? h('pre', { class: 'stbme_block', text: inj.text }) : null,
            ]);
            c.callGenericPopup(content, c.POPUP_TYPE.TEXT, '', { wide: true, allowVerticalScrolling: true });
            return;
        }
        const view = $id('stbme_injection_view');
        if (view) {
            view.hidden = false;
            view.scrollIntoView({ block: 'nearest' });
        }
    }

    return {
        render,
        open,

        /** An entry in ST's extensions menu (#extensionsMenu). */
        addMenuButton() {
            const menu = $id('extensionsMenu');
            if (!menu || $id('stbme_menu_used')) return;
            const item = h('div', { id: 'stbme_menu_used', class: 'list-group-item flex-container flexGap5 interactable', tabindex: 0, title: 'Show the memories injected into the last reply' }, [
                h('div', { class: 'fa-solid fa-brain extensionsMenuExtensionButton' }),
                h('span', { text: 'Memories used' }),
            ]);
            item.addEventListener('click', open);
            menu.append(item);
        },
    };
}
