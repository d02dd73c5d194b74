import { test } from 'node:test';
import assert from 'node:assert/strict';
import { fieldLabel, labelRepeats, memoryRow, rangeLabel } from '../../../st_extension/lib/memory_view.js';

test('a memory whose label is its summary shows the text once', () => {
    const summary = 'Alex told Elena that the vault code is 4417 and asked her to keep it secret.';
    assert.deepEqual(memoryRow({ id: 'n_1', type: 'event', label: summary, fields: { summary } }), { title: '', text: summary });
});

test('a label cut by the server (79 characters and an ellipsis) counts as the same text', () => {
    const summary = 'The lighthouse key is hidden under the blue stone by the well, where Elena left it after the storm last winter.';
    const label = `${summary.slice(0, 79)}…`;
    assert.equal(labelRepeats(label, summary), true);
    assert.deepEqual(memoryRow({ label, fields: { summary } }), { title: '', text: summary });
});

test('a title and a different summary both show; a character shows its state under its name', () => {
    assert.deepEqual(memoryRow({ label: 'The storm', fields: { title: 'The storm', summary: 'A storm wrecked the pier.' } }),
        { title: 'The storm', text: 'A storm wrecked the pier.' });
    assert.deepEqual(memoryRow({ label: 'Elena', fields: { name: 'Elena', state: 'tired, worried about Marek' } }),
        { title: 'Elena', text: 'tired, worried about Marek' });
    assert.deepEqual(memoryRow({ id: 'n_9', label: 'Harbour', fields: { name: 'Harbour' } }), { title: '', text: 'Harbour' });
    assert.equal(labelRepeats('The storm', 'The storm came'), false, 'an uncut label is not a prefix match');
});

test('one message reads "msg 8", a range "msgs 3–8"', () => {
    assert.equal(rangeLabel([8, 8]), 'msg 8');
    assert.equal(rangeLabel([3, 8]), 'msgs 3–8');
    assert.equal(rangeLabel(null), '');
    assert.equal(rangeLabel([1]), '');
});

test('field names read as words', () => {
    assert.equal(fieldLabel('summary'), 'Summary');
    assert.equal(fieldLabel('speaker'), 'Speaker');
    assert.equal(fieldLabel('addressed'), 'Names addressed');   // the chat's names a message only addresses
    assert.equal(fieldLabel('core_note'), 'Core note');
    assert.equal(fieldLabel('some_new_field'), 'Some new field');
});

test('every memory type has words; the filter lists the types the chat has, with counts, in the schema order', async () => {
    const { TYPE_LABELS, typeLabel, typeOptions } = await import('../../../st_extension/lib/memory_view.js');
    for (const type of ['event', 'character', 'location', 'entity', 'rule', 'thread', 'synopsis', 'reflection', 'summary',
        'pov_memory', 'correction', 'preference', 'decision', 'error', 'workflow']) {
        assert.ok(TYPE_LABELS[type], type);
        assert.doesNotMatch(typeLabel(type), /_/);
    }
    assert.equal(typeLabel('new_kind'), 'New kind');
    const types = [{ name: 'event' }, { name: 'character' }, { name: 'entity' }, { name: 'pov_memory' }];
    assert.deepEqual(typeOptions({ pov_memory: 1, character: 2, event: 12, rule: 0 }, types), [
        { value: 'event', text: 'Event (12)' }, { value: 'character', text: 'Character (2)' }, { value: 'pov_memory', text: 'Point of view (1)' },
    ]);
});

test("a long message's pieces read as one row, in the order they were made", async () => {
    const { groupPieces } = await import('../../../st_extension/lib/memory_view.js');
    const piece = (id, created, extra = {}) => ({ id, type: 'event', source: 'heuristic', seq_range: [0, 0], created_at: created, fields: { speaker: 'Elena' }, pinned: false, locked: false, archived: false, ...extra });
    const rows = groupPieces([piece('b', 2), piece('a', 1), { id: 'c', type: 'character', seq_range: [0, 0], fields: {} }, piece('d', 3, { seq_range: [1, 1] })]);
    assert.deepEqual(rows.map(r => r.map(n => n.id)), [['a', 'b'], ['c'], ['d']]);
    assert.deepEqual(groupPieces([piece('x', 1), piece('y', 2, { pinned: true })]).map(r => r.length), [1, 1], 'a pinned piece stands alone');
});

test('the editor offers every field of the type, lists as comma-separated text, and sends only changes', async () => {
    const { editorFields, editedFields } = await import('../../../st_extension/lib/memory_view.js');
    const event = { columns: ['title', 'summary', 'participants', 'status', 'speaker'], required: ['summary'] };
    const node = { type: 'event', fields: { summary: 'Elena hid the key.', participants: ['Elena', 'Alex'], speaker: 'Elena', context: 'in the chapel' } };
    const fields = editorFields(node, event);
    assert.deepEqual(fields.map(f => f.key), ['title', 'summary', 'participants', 'status', 'speaker', 'context']);
    assert.deepEqual(fields.map(f => f.label), ['Title', 'Summary', 'Participants', 'Status', 'Speaker', 'Context']);
    assert.equal(fields.find(f => f.key === 'participants').value, 'Elena, Alex');
    assert.equal(fields.find(f => f.key === 'summary').required, true);
    const texts = Object.fromEntries(fields.map(f => [f.key, f.value]));
    assert.deepEqual(editedFields(fields, texts), {});
    assert.deepEqual(editedFields(fields, { ...texts, title: 'The key', participants: 'Elena, Alex, Mira', context: '' }),
        { title: 'The key', participants: ['Elena', 'Alex', 'Mira'], context: null });
    assert.deepEqual(editorFields({ fields: { summary: 'x', flag: true } }, null).map(f => f.key), ['summary'], 'without the type: its text fields');
});
