import { test } from 'node:test';
import assert from 'node:assert/strict';
import { runRelayRequest, toGenerateRawArgs } from '../../../st_extension/lib/relay.js';

const MESSAGES = [
    { role: 'system', content: '[stbme:extract]\nExtract.' },
    { role: 'user', content: '#1 [assistant Elena]: hi' },
];

test('system messages become systemPrompt; one message is a plain prompt, several a list', () => {
    assert.deepEqual(toGenerateRawArgs(MESSAGES), { systemPrompt: '[stbme:extract]\nExtract.', prompt: '#1 [assistant Elena]: hi' });
    const retry = toGenerateRawArgs([...MESSAGES, { role: 'assistant', content: 'bad' }, { role: 'user', content: 'JSON only' }]);
    assert.equal(retry.prompt.length, 3);
    assert.deepEqual(retry.prompt[1], { role: 'assistant', content: 'bad' });
});

test('runs the request with the object signature of generateRaw and answers with its text', async () => {
    const calls = [];
    const generateRaw = async (opts) => { calls.push(opts); return '{"operations": []}'; };
    const reply = await runRelayRequest({ id: 'r1', task: 'extract', messages: MESSAGES, max_tokens: 900 }, () => ({ generateRaw }));
    assert.deepEqual(reply, { type: 'relay_response', id: 'r1', text: '{"operations": []}' });
    assert.deepEqual(calls, [{ prompt: '#1 [assistant Elena]: hi', systemPrompt: '[stbme:extract]\nExtract.', responseLength: 900 }]);
});

test('supports the older positional generateRaw', async () => {
    const calls = [];
    // eslint-disable-next-line no-unused-vars
    const generateRaw = async (prompt, api, instruct, quietToLoud, systemPrompt, length) => { calls.push([prompt, systemPrompt, length]); return 'ok'; };
    const reply = await runRelayRequest({ id: 'r2', messages: MESSAGES, max_tokens: 100 }, () => ({ generateRaw }));
    assert.equal(reply.text, 'ok');
    assert.deepEqual(calls, [['#1 [assistant Elena]: hi', '[stbme:extract]\nExtract.', 100]]);
});

test('failures and empty answers become an error reply, never a throw', async () => {
    const failing = await runRelayRequest({ id: 'r3', messages: MESSAGES }, () => ({ generateRaw: async () => { throw new Error('No API connected'); } }));
    assert.deepEqual(failing, { type: 'relay_response', id: 'r3', error: 'No API connected' });
    const empty = await runRelayRequest({ id: 'r4', messages: MESSAGES }, () => ({ generateRaw: async () => '  ' }));
    assert.match(empty.error, /empty answer/);
    const missing = await runRelayRequest({ id: 'r5', messages: MESSAGES }, () => ({}));
    assert.match(missing.error, /no generateRaw/);
});
