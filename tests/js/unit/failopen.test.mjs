import { test } from 'node:test';
import assert from 'node:assert/strict';
import { OutageNotifier, TimeoutError, adviceFor, backoffDelay, withDeadline } from '../../../st_extension/lib/failopen.js';

test('a call that never answers resolves as a timeout near the deadline and aborts its signal', async () => {
    let seen;
    const started = Date.now();
    const result = await withDeadline(signal => { seen = signal; return new Promise(() => {}); }, 150);
    const elapsed = Date.now() - started;
    assert.equal(result.ok, false);
    assert.equal(result.reason, 'timeout');
    assert.ok(result.error instanceof TimeoutError);
    assert.ok(seen.aborted, 'the work is told to stop');
    // Generous bound: the point is "bounded", not a benchmark.
    assert.ok(elapsed >= 140 && elapsed < 10000, `took ${elapsed} ms`);
});

test('a fetch that honours the signal stops at the deadline', async () => {
    const result = await withDeadline(signal => new Promise((_, reject) => {
        signal.addEventListener('abort', () => reject(new DOMException('aborted', 'AbortError')));
    }), 50);
    assert.equal(result.reason, 'timeout');
});

test('values and errors pass through; synchronous throws are caught', async () => {
    assert.deepEqual((await withDeadline(async () => 42, 1000)).value, 42);
    const failed = await withDeadline(async () => { throw new Error('refused'); }, 1000);
    assert.equal(failed.ok, false);
    assert.equal(failed.reason, 'error');
    assert.equal(failed.error.message, 'refused');
    const sync = await withDeadline(() => { throw new Error('sync'); }, 1000);
    assert.equal(sync.reason, 'error');
});

test('an outer abort ends the wait', async () => {
    const outer = new AbortController();
    setTimeout(() => outer.abort(new Error('user stopped')), 20);
    const result = await withDeadline(() => new Promise(() => {}), 5000, { outer: outer.signal });
    assert.equal(result.reason, 'aborted');
});

test('the outage notifier tells once per outage', () => {
    const n = new OutageNotifier();
    assert.equal(n.failed('timeout'), true);
    assert.equal(n.failed('timeout'), false);
    assert.equal(n.failed('error'), false);
    assert.equal(n.down, true);
    assert.equal(n.succeeded(), true);
    assert.equal(n.succeeded(), false);
    assert.equal(n.failed('error'), true);
});

test('backoff grows, is capped and jittered', () => {
    const lo = { random: () => 0 }, hi = { random: () => 1 };
    assert.equal(backoffDelay(0, lo), 500);
    assert.equal(backoffDelay(0, hi), 1000);
    assert.equal(backoffDelay(3, hi), 8000);
    assert.equal(backoffDelay(20, hi), 30000);
    assert.equal(backoffDelay(20, { ...lo, max: 10000 }), 5000);
});

test('advice names what to do', () => {
    assert.match(adviceFor({ reason: 'timeout' }, { url: 'http://x' }), /did not answer in time at http:\/\/x/);
    assert.match(adviceFor({ reason: 'error', error: { status: 401 } }), /API token/);
    assert.match(adviceFor({ reason: 'error', error: { status: 404 } }, { mode: 'proxy' }), /enableServerPlugins/);
    assert.match(adviceFor({ reason: 'error', error: new TypeError('Failed to fetch') }), /stbme serve/);
    assert.match(adviceFor({ reason: 'error', error: { status: 500 } }), /failed \(500\)/);
});
