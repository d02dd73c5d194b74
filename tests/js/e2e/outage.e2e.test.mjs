// End to end: a sidecar that dies under a connected page. Its own stack, since the test stops the sidecar.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { SCREENSHOTS } from './support.mjs';
import { chatHistory, smallTalk, startStack } from './stack.mjs';

// The extension's own deadlines as a user has them (lib/settings.js DEFAULTS is 4000/1500), so the
// interceptor's time is checked against them.
const RECALL_MS = 8000;
const SYNC_MS = 1500;

/** @type {Awaited<ReturnType<typeof startStack>>} */
let stack;

before(async () => {
    stack = await startStack({ pageSettings: { recallTimeoutMs: RECALL_MS, syncTimeoutMs: SYNC_MS } });
});

after(async () => {
    await stack?.close();
});

test('a dead sidecar never blocks generation, and the user is told once', async () => {
    const { page, send, openChat } = stack;
    await openChat('Elena - before the outage', chatHistory(smallTalk(2)));
    const listenersBefore = await page.evaluate(() => window.stHost.listenerTimes.length);
    // Counted before the stop: the health loop or the closing live channel may notice the outage at once.
    const toastsBefore = await page.evaluate(() => window.toastr.toasts.length);
    await stack.sidecar.stop();
    const first = await send('Are you still there?');
    const second = await send('Hello?');
    for (const record of [first, second]) {
        assert.ok(record.reply, 'the generation completed');
        assert.equal(record.prompt.messages.findIndex(m => m.injected), -1, 'no memory block');
        assert.ok(record.interceptorMs < RECALL_MS + SYNC_MS + 2000, `interceptor took ${record.interceptorMs} ms`);
    }
    const toasts = await page.evaluate(n => window.toastr.toasts.slice(n), toastsBefore);
    const warnings = toasts.filter(t => t.level === 'warning' && /sidecar/.test(t.message) && !t.suppressed);
    assert.equal(warnings.length, 1, JSON.stringify(toasts));
    assert.match(warnings[0].message, /stbme serve/);
    assert.match(await page.textContent('#stbme_injection_summary'), /without memory/);
    await page.waitForFunction(() => document.querySelector('#stbme_status_dot')?.classList.contains('stbme_dot_down'));
    const slow = await page.evaluate(k => window.stHost.listenerTimes.slice(k).filter(t => t.ms > 100), listenersBefore);
    assert.deepEqual(slow, []);
    await page.screenshot({ path: path.join(SCREENSHOTS, 'sidecar-down.png'), fullPage: true });
    assert.deepEqual(stack.newErrors(), [], 'no uncaught errors in the page');
});
