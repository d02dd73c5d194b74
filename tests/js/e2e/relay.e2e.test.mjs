// End to end: llm.mode = relay, the sidecar's memory LLM calls running on ST's own connection through the
// extension, with ST's backend held so a relayed request stays in flight while the user chats.
// Each test has its own chat, with an LLM extraction for every reply, so whether a request is relayed never
// depends on what an earlier test left in a chat.
import { test, before, after, afterEach } from 'node:test';
import assert from 'node:assert/strict';
import { waitFor } from './support.mjs';
import { LOADED_MS, chatHistory, smallTalk, startStack, withCleanup } from './stack.mjs';

/** @type {Awaited<ReturnType<typeof startStack>>} */
let stack;

before(async () => {
    stack = await startStack();
    await stack.page.waitForFunction(() => window.stbme.debug.live?.state === 'open');
});

after(async () => {
    await stack?.close();
});

afterEach(() => {
    assert.deepEqual(stack.newErrors(), [], 'no uncaught errors in the page');
});

/**
 * In its own chat (processed without an LLM first), put the sidecar in llm.mode = relay with ST's backend
 * held, send `message`, and run `during(rawRequest)` while the extraction of that message is in flight at
 * ST's backend. Then release it and wait for the chat to be processed. Whatever fails, the backend is
 * released and llm.mode goes back to none, and the first failure is the one reported.
 */
async function withHeldRelay(chatId, message, during) {
    const { page, api, send, openChat, settled } = stack;
    // every 1: the reply to `message` is extracted at once, whatever came before it.
    await openChat(chatId, chatHistory(smallTalk(2)), { overrides: { 'extract.every': 1 } });
    const n = await page.evaluate(() => window.stHost.backendRequests.length);
    const release = () => page.evaluate(() => { window.stHost.holdRaw = false; window.stHost.releaseBackend(); });
    await withCleanup(async () => {
        await page.evaluate(() => { window.stHost.holdRaw = true; });
        assert.equal((await api('PUT', '/v1/settings', { settings: { 'llm.mode': 'relay' } })).status, 200);
        await send(message); // its reply is extracted through the relay, on ST's connection
        const raw = await waitFor(() => page.evaluate(([k, text]) => window.stHost.backendRequests.slice(k)
            .find(r => r.kind === 'raw' && !r.answered && JSON.stringify(r.data).includes(text)), [n, message]),
        { timeoutMs: LOADED_MS, what: `the extraction of "${message}" in flight at ST's backend` });
        await during(raw);
        await release();
        await settled(chatId);
    }, async () => {
        await release();
        await api('PUT', '/v1/settings', { settings: { 'llm.mode': 'none' } });
    });
}

test("Chat Completion: a chat generation during a slow relayed request keeps the user's max_tokens", async () => {
    const { page, api, send } = stack;
    await page.evaluate(() => window.stHost.setMainApi('openai', { responseLength: 300 }));
    const userMax = await page.evaluate(() => window.stHost.oai_settings.openai_max_tokens);
    const relayMax = (await api('GET', '/v1/settings')).data.settings['llm.max_tokens'];
    assert.notEqual(userMax, relayMax);
    await withHeldRelay('Elena - relay on Chat Completion', 'Marek borrowed the red lantern from the lighthouse.', async raw => {
        assert.equal(raw.data.max_tokens, relayMax, 'the relayed request asks for the length the sidecar wants');
        assert.equal(await page.evaluate(() => window.stHost.oai_settings.openai_max_tokens), userMax, "ST's setting is untouched");
        const record = await send('What did Marek borrow?');
        assert.ok(record.reply);
        assert.equal(record.request.max_tokens, userMax, 'the chat reply goes out with the user\'s max_tokens');
        assert.equal(record.maxContext, 4095 - userMax, 'and the prompt budget is the user\'s');
    });
});

test("Text completion: a chat generation that starts during a relayed request waits for it, then keeps the user's length", async () => {
    const { page, send } = stack;
    await page.evaluate(() => window.stHost.setMainApi('textgenerationwebui', { responseLength: 250 }));
    await withCleanup(async () => {
        await withHeldRelay('Elena - relay on text completion', 'Elena hid the silver key in the chapel.', async raw => {
            // ST 1.12.6 can only pass a length to a text-completion generateRaw through its global amount_gen.
            assert.equal(raw.data.max_new_tokens, 1200);
            const before = await page.evaluate(() => window.stHost.emitted.length);
            const pending = send('Where is the silver key?');
            await page.waitForFunction(k => window.stHost.emitted.slice(k).some(e => e.event === 'generation_started'), before);
            await page.evaluate(() => { window.stHost.holdRaw = false; window.stHost.releaseBackend(); });
            const record = await pending;
            assert.ok(record.reply);
            assert.equal(record.request.max_new_tokens, 250, 'the chat reply goes out with the user\'s length');
            assert.equal(record.maxContext, 2048 - 250, 'and the prompt budget is the user\'s');
        });
        assert.equal(await page.evaluate(() => window.stHost.amountGen), 250, "the user's setting is restored");
    }, () => page.evaluate(() => window.stHost.setMainApi('openai')));
});
