// How a memory (node JSON, docs/api.md) reads in the memory browser: its title and text without saying
// the same thing twice, its message range, and words for its field names. Pure module: no ST, no DOM.

/** Fields that hold what a memory says, most telling first (the server's TEXT_FIELD_ORDER, plus a few). */
const TEXT_FIELDS = ['summary', 'insight', 'content', 'constraint', 'state', 'traits', 'goal', 'description', 'text',
    'note', 'features', 'belief', 'suggestion'];

/** Words for field names of the node types (graph/schema.py); other names are humanized. */
export const FIELD_LABELS = Object.freeze({
    summary: 'Summary', title: 'Title', participants: 'Participants', status: 'Status', speaker: 'Speaker',
    addressed: 'Names addressed',
    name: 'Name', traits: 'Traits', state: 'State', goal: 'Goal', inventory: 'Inventory', core_note: 'Core note',
    features: 'Features', danger: 'Danger', kind: 'Kind', note: 'Note', constraint: 'Rule', scope: 'Applies to',
    insight: 'Insight', trigger: 'Trigger', suggestion: 'Suggestion', level: 'Level', range: 'Messages',
    belief: 'Belief', emotion: 'Emotion', attitude: 'Attitude', certainty: 'Certainty', about: 'About',
    content: 'Content', wrong: 'Wrong', right: 'Right', text: 'Text', description: 'Description',
});

const squash = text => String(text ?? '').replace(/\s+/g, ' ').trim();

/**
 * 'core_note' -> 'Core note'.
 * @param {string} key a field name
 */
export function fieldLabel(key) {
    if (Object.hasOwn(FIELD_LABELS, key)) return FIELD_LABELS[key];
    const words = String(key).replace(/[_.]+/g, ' ').trim();
    return words ? words[0].toUpperCase() + words.slice(1) : String(key);
}

/**
 * True when `label` says nothing `text` does not: the same words, or the server's cut of them
 * (graph/model.py `node_label`: 79 characters and '…').
 * @param {string} label
 * @param {string} text
 */
export function labelRepeats(label, text) {
    const a = squash(label);
    const b = squash(text);
    if (!a || !b) return false;
    if (a === b) return true;
    const cut = a.replace(/(…|\.\.\.)$/, '').trim();
    return cut.length < a.length && b.startsWith(cut);
}

/**
 * The title and the text of a memory's row; the title is '' when it would repeat the text.
 * @param {{id?: string, type?: string, label?: string, fields?: Record<string, any>}} node
 * @returns {{title: string, text: string}}
 */
export function memoryRow(node) {
    const fields = node?.fields ?? {};
    const label = squash(node?.label) || String(node?.id ?? '');
    const candidates = TEXT_FIELDS.map(key => fields[key]).filter(v => typeof v === 'string' && v.trim());
    // The first text that is not just the label; a label that is a cut of a text shows as that whole text.
    const full = candidates.find(v => labelRepeats(label, v));
    const other = candidates.find(v => !labelRepeats(label, v));
    if (full) return { title: '', text: squash(full) };
    if (other) return { title: label, text: squash(other) };
    return { title: '', text: label };
}

/**
 * 'msg 8' for one message, 'msgs 3–8' for a range, '' when the memory has none.
 * @param {[number, number] | null | undefined} range node JSON `seq_range`
 */
export function rangeLabel(range) {
    if (!Array.isArray(range) || range.length !== 2 || !range.every(Number.isInteger)) return '';
    const [first, last] = range;
    return first === last ? `msg ${first}` : `msgs ${first}–${last}`;
}

/** Words for the memory types (graph/schema.py NODE_TYPES); other types are humanized. */
export const TYPE_LABELS = Object.freeze({
    event: 'Event', character: 'Character', location: 'Place', entity: 'Thing', rule: 'Rule', thread: 'Plot thread',
    synopsis: 'Synopsis', reflection: 'Reflection', summary: 'Summary', pov_memory: 'Point of view',
    correction: 'Correction', preference: 'Preference', decision: 'Decision', error: 'Mistake to avoid', workflow: 'Way of working',
});

/** @param {string} type */
export function typeLabel(type) {
    return Object.hasOwn(TYPE_LABELS, type) ? TYPE_LABELS[type] : fieldLabel(type);
}

/**
 * The browser's type filter: the types the chat has, with their counts, in the schema's order.
 * @param {Record<string, number> | null | undefined} counts the nodes list's `types`
 * @param {{name: string}[] | null | undefined} types GET /v1/memory-types (for the order; optional)
 * @returns {{value: string, text: string}[]}
 */
export function typeOptions(counts, types) {
    const have = Object.entries(counts ?? {}).filter(([, n]) => n > 0);
    const order = (types ?? []).map(t => t.name);
    const rank = name => (order.includes(name) ? order.indexOf(name) : order.length);
    have.sort(([a], [b]) => rank(a) - rank(b) || a.localeCompare(b));
    return have.map(([name, n]) => ({ value: name, text: `${typeLabel(name)} (${n})` }));
}

/**
 * Rows of the browser: a long message is stored as several event memories (extract.chunk_tokens); its
 * pieces read as one row, in the order they were made. Other memories are a row each.
 * @param {object[]} nodes a page of the nodes list, in its order
 * @returns {object[][]} the rows, each a list of nodes
 */
export function groupPieces(nodes) {
    const rows = [];
    const keyOf = n => {
        const r = n?.seq_range;
        if (n?.type !== 'event' || n.source !== 'heuristic' || !Array.isArray(r) || r[0] !== r[1]) return null;
        return `${r[0]}|${n.fields?.speaker ?? ''}|${n.pinned}|${n.locked}|${n.archived}`;
    };
    for (const node of Array.isArray(nodes) ? nodes : []) {
        const key = keyOf(node);
        const last = rows[rows.length - 1];
        if (key && last && keyOf(last[0]) === key) last.push(node);
        else rows.push([node]);
    }
    return rows.map(row => row.slice().sort((a, b) => (a.created_at ?? 0) - (b.created_at ?? 0)));
}

/**
 * The editor's fields for a memory: every field of its type (an empty one can be filled in), then any
 * other text field it has. A list (participants) is edited as comma-separated text.
 * @param {{type?: string, fields?: Record<string, any>}} node
 * @param {{columns?: string[], required?: string[]} | null | undefined} typeDef its GET /v1/memory-types entry
 * @returns {{key: string, label: string, value: string, list: boolean, number: boolean, required: boolean}[]}
 */
export function editorFields(node, typeDef) {
    const fields = node?.fields ?? {};
    const editable = v => v === undefined || v === null || ['string', 'number'].includes(typeof v)
        || (Array.isArray(v) && v.every(x => typeof x === 'string'));
    const keys = [...(typeDef?.columns ?? [])];
    for (const key of Object.keys(fields)) if (!keys.includes(key)) keys.push(key);
    return keys.filter(key => editable(fields[key])).map(key => {
        const v = fields[key];
        return {
            key, label: fieldLabel(key), value: Array.isArray(v) ? v.join(', ') : String(v ?? ''),
            list: Array.isArray(v), number: typeof v === 'number', required: !!typeDef?.required?.includes(key),
        };
    });
}

/**
 * What the editor sends for its fields: only the changed ones; an emptied field is removed (null).
 * @param {ReturnType<typeof editorFields>} fields
 * @param {Record<string, string>} texts the inputs' text by field key
 * @returns {Record<string, any>}
 */
export function editedFields(fields, texts) {
    const changed = {};
    for (const f of fields) {
        const text = String(texts[f.key] ?? '').trim();
        if (text === f.value.trim()) continue;
        if (!text) changed[f.key] = null;
        else if (f.list) changed[f.key] = text.split(',').map(x => x.trim()).filter(Boolean);
        else if (f.number && Number.isFinite(Number(text))) changed[f.key] = Number(text);
        else changed[f.key] = text;
    }
    return changed;
}
