// The memory browser in the panel: list, search and page through the open chat's memories, pin, lock,
// archive and restore them, edit their fields, and add one by hand. Owns: the page and the filter.

import { fieldLabel, memoryRow, rangeLabel } from '../lib/memory_view.js';
import { $id, h, onClick, toggleSection } from './dom.js';
import { confirmPopup, currentChatId, toast } from './st.js';

const PAGE = 20;

/**
 * @param {object} deps
 * @param {ReturnType<import('./connection.js').createConnection>} deps.connection
 */
export function createMemoryBrowser({ connection }) {
    let offset = 0;
    let total = 0;

    const isOpen = () => {
        const browser = $id('stbme_browser');
        return !!browser && !browser.hidden;
    };

    async function refresh() {
        const list = $id('stbme_browser_list');
        const info = $id('stbme_browser_info');
        if (!list) return;
        const chatId = currentChatId();
        if (!chatId) {
            list.replaceChildren();
            info.textContent = 'Open a chat to browse its memories.';
            return;
        }
        const filter = {
            offset,
            limit: PAGE,
            type: $id('stbme_browser_type')?.value ?? '',
            q: $id('stbme_browser_q')?.value.trim() ?? '',
            archived: !!$id('stbme_browser_archived')?.checked,
        };
        let res;
        try {
            res = await connection.client.nodes(chatId, filter);
        } catch (error) {
            if (currentChatId() !== chatId) return;
            list.replaceChildren();
            info.textContent = error.status === 404 ? 'No memories for this chat yet.' : `Cannot load memories: ${error.message}`;
            return;
        }
        if (currentChatId() !== chatId) return;
        total = res.total ?? 0;
        const nodes = res.nodes ?? [];
        info.textContent = total ? `${offset + 1}–${offset + nodes.length} of ${total}` : 'No memories match.';
        list.replaceChildren(...nodes.map(node => renderNode(chatId, node)));
    }

    function renderNode(chatId, node) {
        const flags = [node.pinned && 'pinned', node.locked && 'locked', node.archived && 'archived'].filter(Boolean);
        const { title, text } = memoryRow(node);
        const range = rangeLabel(node.seq_range);
        const row = h('li', { class: 'stbme_node', 'data-id': node.id }, [
            h('div', { class: 'stbme_node_head' }, [
                h('span', { class: 'stbme_type', text: node.type }),
                h('span', { class: 'stbme_flags', text: flags.join(' · ') }),
                h('span', { class: 'stbme_meta', text: `importance ${node.importance ?? '?'}${range ? ` · ${range}` : ''}` }),
            ]),
            title ? h('div', { class: 'stbme_node_title', text: title }) : null,
            h('div', { class: 'stbme_node_text', text }),
        ]);
        const act = (label, action, title) => h('button', {
            class: 'menu_button stbme_small', text: label, title, 'data-action': action,
            onclick: async () => {
                try {
                    await connection.client.nodeAction(chatId, node.id, action);
                    await refresh();
                } catch (error) {
                    toast('error', `${label} failed: ${error.message}`);
                }
            },
        });
        row.append(h('div', { class: 'stbme_node_actions' }, [
            h('button', { class: 'menu_button stbme_small', text: 'Edit', 'data-action': 'edit', onclick: () => edit(chatId, node, row) }),
            node.pinned ? act('Unpin', 'unpin') : act('Pin', 'pin', 'Always include in recall'),
            node.locked ? act('Unlock', 'unlock') : act('Lock', 'lock', 'Protect from edits and evolution'),
            node.archived ? act('Restore', 'restore') : act('Archive', 'archive', 'Hide from recall (can be restored)'),
        ]));
        return row;
    }

    function edit(chatId, node, row) {
        if (row.querySelector('.stbme_editor')) return;
        const fields = node.fields ?? {};
        const inputs = {};
        const editor = h('div', { class: 'stbme_editor' });
        for (const [key, value] of Object.entries(fields)) {
            if (typeof value !== 'string' && typeof value !== 'number') continue;
            const id = `stbme_edit_${String(node.id).replace(/[^\w-]+/g, '_')}_${key.replace(/[^\w-]+/g, '_')}`;
            inputs[key] = h('textarea', { id, class: 'text_pole textarea_compact', rows: String(value).length > 80 ? 3 : 1, 'data-field': key });
            inputs[key].value = String(value);
            editor.append(h('label', { for: id, text: fieldLabel(key) }), inputs[key]);
        }
        const importance = h('input', { type: 'number', class: 'text_pole', min: 0, max: 10, step: 1, value: node.importance ?? 5 });
        const error = h('div', { class: 'stbme_field_error', role: 'alert' });
        editor.append(h('label', { text: 'Importance (0–10)' }), importance, error);
        const save = async (unlock = false) => {
            const changed = {};
            for (const [key, input] of Object.entries(inputs)) {
                const original = fields[key];
                const value = typeof original === 'number' ? Number(input.value) : input.value;
                if (value !== original) changed[key] = value;
            }
            const body = { fields: changed, importance: Number(importance.value) };
            if (unlock) body.unlock = true;
            try {
                await connection.client.patchNode(chatId, node.id, body);
                await refresh();
            } catch (e) {
                if (e.status === 409 && !unlock && await confirmPopup('This memory is locked. Unlock it and save the edit?')) return save(true);
                error.textContent = e.field ? `${e.field}: ${e.message}` : e.message;
            }
        };
        editor.append(h('div', { class: 'flex-container' }, [
            h('button', { class: 'menu_button stbme_small', text: 'Save', 'data-action': 'save', onclick: () => save() }),
            h('button', { class: 'menu_button stbme_small', text: 'Cancel', onclick: () => editor.remove() }),
        ]));
        row.append(editor);
    }

    const fail = error => toast('error', error.message);
    const search = () => {
        offset = 0;
        return refresh();
    };

    return {
        refresh,

        /** Refresh when the browser is open (memories changed); never throws. */
        refreshIfOpen() {
            if (isOpen()) refresh().catch(() => {});
        },

        /** The chat changed: back to the first page. */
        reset() {
            offset = 0;
        },

        /** Wire the browser's controls (after the panel is in the page). */
        bind() {
            onClick('stbme_show_browser', async () => {
                if (toggleSection('stbme_browser')) await refresh();
            }, fail);
            onClick('stbme_browser_search', search, fail);
            $id('stbme_browser_q')?.addEventListener('keydown', event => {
                if (event.key === 'Enter') {
                    event.preventDefault();
                    search().catch(fail);
                }
            });
            onClick('stbme_browser_prev', async () => {
                offset = Math.max(0, offset - PAGE);
                await refresh();
            }, fail);
            onClick('stbme_browser_next', async () => {
                if (offset + PAGE < total) offset += PAGE;
                await refresh();
            }, fail);
            onClick('stbme_remember_add', async () => {
                const input = $id('stbme_remember_text');
                const text = input?.value.trim();
                if (!text) return;
                const chatId = currentChatId();
                if (!chatId) throw new Error('Open a chat first.');
                await connection.client.createNode(chatId, { text });
                input.value = '';
                await refresh();
            }, fail);
        },
    };
}
