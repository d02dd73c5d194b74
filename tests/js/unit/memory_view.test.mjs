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
    assert.equal(fieldLabel('core_note'), 'Core note');
    assert.equal(fieldLabel('some_new_field'), 'Some new field');
});
