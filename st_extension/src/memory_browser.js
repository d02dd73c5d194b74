// The memory browser in the panel: list, search and page through the open chat's memories, pin, lock,
// archive and restore them, edit their fields, and add one by hand. The pieces of a long message read as
// one row. Owns: the page, the filter, the memory types (fetched once).

import { editedFields, editorFields, groupPieces, memoryRow, rangeLabel, typeLabel, typeOptions } from '../lib/memory_view.js';
import { plural } from '../lib/wording.js';
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
    // Which refresh is the newest: an older one's answer (a slower request, from before the user searched
    // again) is dropped, or it would replace the newer list.
    let newest = 0;
    /** @type {Map<string, {name: string, columns: string[], required: string[]}> | null} */
    let types = null;

    const isOpen = () => {
        const browser = $id('stbme_browser');
        return !!browser && !browser.hidden;
    };

    async function loadTypes() {
        if (types) return types;
        try {
            const res = await connection.client.memoryTypes();
            types = new Map((res.types ?? []).map(t => [t.name, t]));
        } catch {
            return new Map(); // an older sidecar: the filter and the editor work from what the chat has
        }
        return types;
    }

    /** The type filter: the types this chat has, with counts; the chosen one stays listed. */
    function drawTypeFilter(counts) {
        const select = $id('stbme_browser_type');
        if (!select) return;
        const chosen = select.value;
        const options = typeOptions(counts, types ? [...types.values()] : []);
        if (chosen && !options.some(o => o.value === chosen)) options.push({ value: chosen, text: `${typeLabel(chosen)} (0)` });
        select.replaceChildren(h('option', { value: '', text: 'All types' }), ...options.map(o => h('option', { value: o.value, text: o.text })));
        select.value = chosen;
    }

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
        const asked = ++newest;
        const outdated = () => asked !== newest || currentChatId() !== chatId;
        await loadTypes();
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
            if (outdated()) return;
            list.replaceChildren();
            info.textContent = error.status === 404 ? 'No memories for this chat yet.' : `Cannot load memories: ${error.message}`;
            return;
        }
        if (outdated()) return;
        total = res.total ?? 0;
        const nodes = res.nodes ?? [];
        drawTypeFilter(res.types);
        info.textContent = total ? `${offset + 1}–${offset + nodes.length} of ${total}` : 'No memories match.';
        // A refresh (a memory changed in the background, another row's action) keeps an open editor and what
        // is typed in it: it moves to the memory's new row.
        const editors = new Map();
        for (const row of list.querySelectorAll('.stbme_node')) {
            const editor = row.querySelector(':scope > .stbme_editor');
            if (editor) editors.set(row.dataset.id, editor);
        }
        const rows = groupPieces(nodes).map(row => renderRow(chatId, row));
        for (const row of rows) {
            const editor = editors.get(row.dataset.id);
            if (editor) row.append(editor);
        }
        list.replaceChildren(...rows);
    }

    /** One row: a memory, or the pieces of one long message. */
    function renderRow(chatId, pieces) {
        const node = pieces[0];
        const flags = [node.pinned && 'pinned', node.locked && 'locked', node.archived && 'archived'].filter(Boolean);
        const { title, text } = pieces.length > 1
            ? { title: '', text: pieces.map(p => memoryRow(p).text).join(' ') }
            : memoryRow(node);
        const range = rangeLabel(node.seq_range);
        const meta = [`importance ${node.importance ?? '?'}`, range, pieces.length > 1 ? plural(pieces.length, 'part') : ''].filter(Boolean);
        const row = h('li', { class: 'stbme_node', 'data-id': node.id, 'data-ids': pieces.map(p => p.id).join(' ') }, [
            h('div', { class: 'stbme_node_head' }, [
                h('span', { class: 'stbme_type', text: typeLabel(node.type) }),
                h('span', { class: 'stbme_flags', text: flags.join(' · ') }),
                h('span', { class: 'stbme_meta', text: meta.join(' · ') }),
            ]),
            title ? h('div', { class: 'stbme_node_title', text: title }) : null,
            h('div', { class: 'stbme_node_text', text }),
        ]);
        const act = (label, action, hint) => h('button', {
            class: 'menu_button stbme_small', text: label, title: hint, 'data-action': action,
            onclick: async () => {
                try {
                    for (const piece of pieces) await connection.client.nodeAction(chatId, piece.id, action);
                    await refresh();
                } catch (error) {
                    toast('error', `${label} failed: ${error.message}`);
                }
            },
        });
        row.append(h('div', { class: 'stbme_node_actions' }, [
            h('button', { class: 'menu_button stbme_small', text: 'Edit', 'data-action': 'edit', onclick: () => edit(chatId, pieces, row) }),
            node.pinned ? act('Unpin', 'unpin', 'Recall it only when it is relevant') : act('Pin', 'pin', 'Always put it in the memory block'),
            node.locked ? act('Unlock', 'unlock', 'Let the sidecar update it again') : act('Lock', 'lock', 'The sidecar never changes, merges or forgets it'),
            node.archived ? act('Restore', 'restore', 'Recall it again') : act('Archive', 'archive', 'Leave it out of recall (it can be restored)'),
        ]));
        return row;
    }

    /** The editor: every field of the memory's type (a piece of a long message: its text). */
    function edit(chatId, pieces, row) {
        if (row.querySelector('.stbme_editor')) return;
        const editor = h('div', { class: 'stbme_editor' });
        const edits = pieces.map((node, part) => {
            const fields = pieces.length > 1
                ? editorFields({ fields: { summary: node.fields?.summary ?? '' } }, { columns: ['summary'], required: ['summary'] })
                : editorFields(node, types?.get(node.type));
            const inputs = {};
            for (const f of fields) {
                const id = `stbme_edit_${String(node.id).replace(/[^\w-]+/g, '_')}_${f.key.replace(/[^\w-]+/g, '_')}`;
                inputs[f.key] = h('textarea', { id, class: 'text_pole textarea_compact', rows: f.value.length > 80 ? 3 : 1, 'data-field': f.key, placeholder: f.list ? 'comma-separated' : '' });
                inputs[f.key].value = f.value;
                const label = pieces.length > 1 ? `Part ${part + 1}` : `${f.label}${f.required ? ' (needed)' : ''}`;
                editor.append(h('label', { for: id, text: label }), inputs[f.key]);
            }
            return { node, fields, inputs };
        });
        const importance = h('input', { type: 'number', class: 'text_pole', min: 0, max: 10, step: 1, value: pieces[0].importance ?? 5 });
        const error = h('div', { class: 'stbme_field_error', role: 'alert' });
        editor.append(h('label', { text: 'Importance (0–10)' }), importance, error);
        const save = async (unlock = false) => {
            try {
                for (const { node, fields, inputs } of edits) {
                    const texts = Object.fromEntries(Object.entries(inputs).map(([key, input]) => [key, input.value]));
                    const body = { fields: editedFields(fields, texts), importance: Number(importance.value) };
                    if (unlock) body.unlock = true;
                    await connection.client.patchNode(chatId, node.id, body);
                }
                editor.remove();   // saved: the refresh shows the memory as it is now
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
            $id('stbme_browser_type')?.addEventListener('change', () => { search().catch(fail); });
            $id('stbme_browser_archived')?.addEventListener('change', () => { search().catch(fail); });
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
