// How a memory (node JSON, docs/api.md) reads in the memory browser: its title and text without saying
// the same thing twice, its message range, and words for its field names. Pure module: no ST, no DOM.

/** Fields that hold what a memory says, most telling first (the server's TEXT_FIELD_ORDER, plus a few). */
const TEXT_FIELDS = ['summary', 'insight', 'content', 'constraint', 'state', 'traits', 'goal', 'description', 'text',
    'note', 'features', 'belief', 'suggestion'];

/** Words for field names of the node types (graph/schema.py); other names are humanized. */
export const FIELD_LABELS = Object.freeze({
    summary: 'Summary', title: 'Title', participants: 'Participants', status: 'Status', speaker: 'Speaker',
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
