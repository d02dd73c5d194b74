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
