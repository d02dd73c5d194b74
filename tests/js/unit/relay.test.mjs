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

/** ST 1.12.6 on Chat Completion, as far as the relay sees it: a global length, generateRaw, the settings event. */
function chatCompletionSt({ userMaxTokens = 300 } = {}) {
    const listeners = {};
    const st = {
        oai: { openai_max_tokens: userMaxTokens },
        sent: [],
        eventTypes: { CHAT_COMPLETION_SETTINGS_READY: 'chat_completion_settings_ready' },
        eventSource: {
            on: (e, f) => { (listeners[e] ??= []).push(f); },
            removeListener: (e, f) => { listeners[e] = (listeners[e] ?? []).filter(x => x !== f); },
            emit: async (e, ...args) => { for (const f of listeners[e] ?? []) await f(...args); },
        },
        listenerCount: () => Object.values(listeners).reduce((n, l) => n + l.length, 0),
        /** openai.js sendOpenAIRequest: the body from the globals, the event, then the request. */
        async send(messages) {
            const data = { messages, max_tokens: st.oai.openai_max_tokens };
            await st.eventSource.emit('chat_completion_settings_ready', data);
            st.sent.push(data);
        },
        // script.js 1.12.6 generateRaw (positional), with saveResponseLength/restoreResponseLength
        async generateRaw(prompt, api, instructOverride, quietToLoud, systemPrompt, responseLength) {
            const saved = st.oai.openai_max_tokens;
            if (responseLength) st.oai.openai_max_tokens = responseLength;
            try {
                // a chat generation built now reads the global
                await st.send([{ role: 'user', content: 'the chat, built meanwhile' }]);
                await st.send([{ role: 'system', content: systemPrompt }, { role: 'user', content: prompt.trim() }]);
                return '{"operations": []}';
            } finally {
                if (responseLength) st.oai.openai_max_tokens = saved;
            }
        },
    };
    return st;
}

test("Chat Completion: the relay's length goes on its own request; ST's setting and other requests keep the user's", async () => {
    const st = chatCompletionSt();
    const reply = await runRelayRequest({ id: 'r6', messages: MESSAGES, max_tokens: 1200 }, () => st, { length: 'request' });
    assert.equal(reply.text, '{"operations": []}');
    const [chat, relayed] = st.sent;
    assert.equal(chat.max_tokens, 300, 'a chat request built during the relay keeps the user\'s length');
    assert.equal(relayed.max_tokens, 1200, 'the relayed request gets the length the sidecar asked for');
    assert.equal(st.oai.openai_max_tokens, 300);
    assert.equal(st.listenerCount(), 0, 'the listener is removed');
});

test('the old way (responseLength) is what leaks the length into a chat request built meanwhile', async () => {
    const st = chatCompletionSt();
    await runRelayRequest({ id: 'r7', messages: MESSAGES, max_tokens: 1200 }, () => st, { length: 'argument' });
    assert.equal(st.sent[0].max_tokens, 1200, 'this is why argument mode needs the GenerationGate');
});

test('o1 models: max_completion_tokens is set instead', async () => {
    const st = chatCompletionSt();
    // openai.js 1.12.6 renames max_tokens for o1 models before it emits the event
    st.send = async messages => {
        const data = { messages, max_completion_tokens: st.oai.openai_max_tokens };
        await st.eventSource.emit('chat_completion_settings_ready', data);
        st.sent.push(data);
    };
    await runRelayRequest({ id: 'r8', messages: MESSAGES, max_tokens: 1200 }, () => st, { length: 'request' });
    assert.deepEqual(st.sent.map(d => d.max_completion_tokens), [300, 1200]);
    assert.ok(st.sent.every(d => !('max_tokens' in d)));
});

test('a request body it cannot recognise keeps ST\'s length and says so', async () => {
    const st = chatCompletionSt();
    const generateRaw = st.generateRaw;
    // e.g. ST's macro substitution changed the first words of the prompt (positional signature, as 1.12.6)
    st.generateRaw = (prompt, api, instructOverride, quietToLoud, systemPrompt, responseLength) =>
        generateRaw(prompt.replace('Elena', 'E.'), api, instructOverride, quietToLoud, systemPrompt, responseLength);
    const warnings = [];
    const warn = console.warn;
    console.warn = message => warnings.push(String(message));
    try {
        await runRelayRequest({ id: 'r9', messages: MESSAGES, max_tokens: 1200 }, () => st, { length: 'request' });
    } finally {
        console.warn = warn;
    }
    assert.deepEqual(st.sent.map(d => d.max_tokens), [300, 300]);
    assert.equal(st.oai.openai_max_tokens, 300);
    assert.match(warnings.join('\n'), /own response length/);
});

const SCHEMA = { type: 'object', properties: { operations: { type: 'array' } }, required: ['operations'] };

/**
 * ST 1.13+ generateRaw over a Chat Completion model that writes `modelText`: with a jsonSchema, script.js
 * reads the answer as JSON and hands back '{}' when it cannot (extractJsonFromData); without, the text.
 */
function structuredSt(modelText, { onlineStatus = 'gpt-4o-mini', mainApi = 'openai' } = {}) {
    const st = { mainApi, onlineStatus, chatCompletionSettings: { chat_completion_source: 'openai' }, calls: [] };
    st.generateRaw = async (opts) => {
        st.calls.push(opts);
        if (!opts.jsonSchema) return modelText;
        try { return JSON.stringify(JSON.parse(modelText) ?? {}); } catch { return '{}'; }
    };
    return st;
}

test('on Chat Completion the schema goes to generateRaw as its jsonSchema', async () => {
    const st = structuredSt('{"operations": [{"op": "delete", "id": "M1"}]}');
    const reply = await runRelayRequest({ id: 's1', task: 'extract', messages: MESSAGES, max_tokens: 900, schema: SCHEMA },
        () => st, { structured: true });
    assert.deepEqual(reply, { type: 'relay_response', id: 's1', text: '{"operations":[{"op":"delete","id":"M1"}]}' });
    assert.equal(st.calls.length, 1);
    assert.deepEqual(st.calls[0].jsonSchema, { name: 'stbme_extract', value: SCHEMA, strict: false });
});

test('no schema where ST cannot read a structured answer back: other APIs, the positional generateRaw, a task without one', async () => {
    const textCompletion = structuredSt('{"operations": []}', { mainApi: 'textgenerationwebui' });
    await runRelayRequest({ id: 's2', task: 'extract', messages: MESSAGES, schema: SCHEMA }, () => textCompletion, { structured: false });
    assert.ok(!('jsonSchema' in textCompletion.calls[0]), 'ST answers "{}" to any schema on text completion');

    const noSchema = structuredSt('{"summary": "They met."}');
    await runRelayRequest({ id: 's3', task: 'summary', messages: MESSAGES }, () => noSchema, { structured: true });
    assert.ok(!('jsonSchema' in noSchema.calls[0]));

    const positional = [];
    // eslint-disable-next-line no-unused-vars
    async function generateRaw(prompt, api, instruct, quietToLoud, systemPrompt, length) { positional.push([...arguments]); return 'ok'; }
    const reply = await runRelayRequest({ id: 's4', task: 'extract', messages: MESSAGES, schema: SCHEMA }, () => ({ generateRaw, mainApi: 'openai' }), { structured: true });
    assert.equal(reply.text, 'ok');
    assert.equal(positional[0].length, 6, 'ST 1.12.6 takes no schema: the call is unchanged');
    assert.ok(positional[0].every(a => typeof a !== 'object' || a === null), JSON.stringify(positional[0]));
});

test('a connection whose structured answer holds no JSON is asked again for text, and for text from then on', async () => {
    const schemaRefused = new Set();
    const fenced = '```json\n{"operations": []}\n```';   // a provider that ignored the schema
    const st = structuredSt(fenced);
    const warnings = [];
    const warn = console.warn;
    console.warn = message => warnings.push(String(message));
    try {
        const first = await runRelayRequest({ id: 's5', task: 'extract', messages: MESSAGES, schema: SCHEMA }, () => st,
            { structured: true, schemaRefused });
        assert.equal(first.text, fenced, 'the plain answer, which the sidecar reads tolerantly, not ST\'s "{}"');
        assert.deepEqual(st.calls.map(c => Boolean(c.jsonSchema)), [true, false]);
        await runRelayRequest({ id: 's6', task: 'extract', messages: MESSAGES, schema: SCHEMA }, () => st, { structured: true, schemaRefused });
        assert.deepEqual(st.calls.map(c => Boolean(c.jsonSchema)), [true, false, false], 'remembered: one call, no schema');
    } finally {
        console.warn = warn;
    }
    assert.equal(warnings.length, 1);
    assert.match(warnings[0], /no JSON for a structured request/);

    const otherModel = structuredSt('{"operations": []}', { onlineStatus: 'claude-3-5-sonnet' });
    await runRelayRequest({ id: 's7', task: 'extract', messages: MESSAGES, schema: SCHEMA }, () => otherModel, { structured: true, schemaRefused });
    assert.ok(otherModel.calls[0].jsonSchema, 'another connection is still asked with the schema');
});

test('a connection that rejects the schema is asked again without it; a stop by the user is not', async () => {
    const schemaRefused = new Set();
    const calls = [];
    const generateRaw = async (opts) => {
        calls.push(Boolean(opts.jsonSchema));
        if (opts.jsonSchema) throw new Error('400: response_format json_schema is not supported by this model');
        return '{"operations": []}';
    };
    const st = { mainApi: 'openai', onlineStatus: 'some-model', generateRaw };
    const warn = console.warn;
    console.warn = () => {};
    try {
        const reply = await runRelayRequest({ id: 's8', task: 'extract', messages: MESSAGES, schema: SCHEMA }, () => st, { structured: true, schemaRefused });
        assert.equal(reply.text, '{"operations": []}');
        assert.deepEqual(calls, [true, false]);
        assert.ok(schemaRefused.has('openai||some-model'));

        const stopped = [];
        const abort = Object.assign(new Error('Cancelled by extension'), { name: 'AbortError' });
        const stoppedSt = { mainApi: 'openai', onlineStatus: 'other', generateRaw: async (opts) => { stopped.push(opts); throw abort; } };
        const reply2 = await runRelayRequest({ id: 's9', task: 'extract', messages: MESSAGES, schema: SCHEMA }, () => stoppedSt, { structured: true, schemaRefused });
        assert.deepEqual(reply2, { type: 'relay_response', id: 's9', error: 'Cancelled by extension' });
        assert.equal(stopped.length, 1);
        assert.ok(!schemaRefused.has('openai||other'));
    } finally {
        console.warn = warn;
    }
});
