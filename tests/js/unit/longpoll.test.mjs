import test from 'node:test';
import assert from 'node:assert/strict';

import { LongPollChannel } from '../../../st_extension/lib/longpoll.js';
import { ManualClock } from '../support/clock.mjs';
import { waitFor } from '../support/wait.mjs';

function fakeServer() {
    const queue = [];
    const posted = [];
    let waiting = null;
    return {
        posted,
        push(message) {
            queue.push(message);
            if (waiting) { const w = waiting; waiting = null; w(); }
        },
        async post(path, body, { signal } = {}) {
            posted.push({ path, body });
            if (path === '/v1/live/send') return { ok: true, reply: null };
            if (!queue.length) {
                await new Promise((resolve, reject) => {
                    waiting = resolve;
                    signal?.addEventListener('abort', () => reject(new Error('aborted')));
                });
            }
            return { ok: true, messages: queue.splice(0) };
        },
    };
}

test('long-poll delivers messages in order and offers the relay', async () => {
    const server = fakeServer();
    const got = [];
    const states = [];
    const channel = new LongPollChannel({ post: server.post, onMessage: m => got.push(m), onState: s => states.push(s), clientId: 'tab-12345' });
    channel.start();
    server.push({ type: 'notice', message: 'one' });
    server.push({ type: 'progress', done: 1 });
    await waitFor(() => got.length === 2, { what: 'both messages' });
    assert.deepEqual(got.map(m => m.type), ['notice', 'progress']);
    const poll = server.posted.find(p => p.path === '/v1/live/poll');
    assert.deepEqual(poll.body, { client_id: 'tab-12345', wait_s: 20, relay: true });
    assert.ok(states.includes('open'));
    assert.equal(channel.send({ type: 'relay_response', id: 'r1', text: 'hi' }), true);
    const sent = await waitFor(() => server.posted.find(p => p.path === '/v1/live/send'), { what: 'the send' });
    assert.deepEqual(sent, { path: '/v1/live/send', body: { client_id: 'tab-12345', message: { type: 'relay_response', id: 'r1', text: 'hi' } } });
    channel.stop();
    assert.equal(channel.send({ type: 'ping' }), false);
    assert.equal(states.at(-1), 'closed');
});

test('long-poll backs off after failures and recovers', async () => {
    const clock = new ManualClock();
    let calls = 0;
    const got = [];
    const channel = new LongPollChannel({
        post: async () => {
            calls += 1;
            if (calls <= 2) throw new Error('proxy down');
            if (calls === 3) return { messages: [{ type: 'hello' }] };
            return new Promise(() => {});
        },
        onMessage: m => got.push(m),
        backoff: { base: 5, max: 10, random: () => 0.5 },
        timers: clock,
    });
    channel.start();
    await waitFor(() => clock.pending.length === 1, { what: 'the first backoff' });
    assert.equal(calls, 1, 'no retry before the backoff ends');
    clock.fireNext();
    await waitFor(() => clock.pending.length === 1, { what: 'the second backoff' });
    assert.equal(calls, 2);
    clock.fireNext();
    await waitFor(() => calls === 4, { what: 'the poll after the answer' });
    assert.deepEqual(got, [{ type: 'hello' }]);
    assert.deepEqual(clock.fired, [4, 8], 'the backoff grows');
    assert.deepEqual(clock.pending, [], 'no backoff after a good answer');
    channel.stop();
});
