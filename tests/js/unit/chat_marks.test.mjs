import { test } from 'node:test';
import assert from 'node:assert/strict';
import { WIDEST_LIT_RANGE, markFor, markTitle, rememberedMessages, usedMessages } from '../../../st_extension/lib/chat_marks.js';

test('the messages behind the last block: one message or a short range each; a long summary lights none', () => {
    const used = usedMessages([{ seq_range: [3, 3] }, { seq_range: [3, 5] }, { seq_range: null }, { seq_range: [0, WIDEST_LIT_RANGE + 5] }]);
    assert.deepEqual([...used.entries()], [[3, 2], [4, 1], [5, 1]]);
    assert.deepEqual([...usedMessages(null).entries()], []);
});

test('a message is marked used, remembered, or not at all', () => {
    const remembered = rememberedMessages({ messages: [{ index: 1, memories: 2 }, { index: 3, memories: 1 }, { index: 4, memories: 0 }] });
    const used = usedMessages([{ seq_range: [3, 3] }]);
    assert.deepEqual(markFor(1, remembered, used), { state: 'remembered', memories: 2, used: 0 });
    assert.deepEqual(markFor(3, remembered, used), { state: 'used', memories: 1, used: 1 });
    assert.deepEqual(markFor(4, remembered, used), { state: null, memories: 0, used: 0 });
    assert.equal(markTitle(markFor(1, remembered, used)), 'Remembered: 2 memories. Click to see them.');
    assert.equal(markTitle(markFor(3, remembered, used)), 'Remembered: 1 memory; one was in the memory block of the last reply. Click to see them.');
    assert.equal(markTitle(markFor(4, remembered, used)), '');
});
