import { test } from 'node:test';
import assert from 'node:assert/strict';
import { LiveChannel } from '../../../st_extension/lib/live.js';
import { ManualClock } from '../support/clock.mjs';

class FakeSocket {
    static instances = [];
    constructor(url) {
        this.url = url;
        this.readyState = 0;
        this.sent = [];
        FakeSocket.instances.push(this);
    }
    send(data) { this.sent.push(JSON.parse(data)); }
    close() { this.readyState = 3; }
    open() { this.readyState = 1; this.onopen?.(); }
    message(obj) { this.onmessage?.({ data: typeof obj === 'string' ? obj : JSON.stringify(obj) }); }
    drop() { this.readyState = 3; this.onclose?.(); }
}

test('connects, says hello, delivers messages and reconnects with growing backoff', () => {
    FakeSocket.instances = [];
    const clock = new ManualClock();
    const messages = [];
    const states = [];
    const ch = new LiveChannel({
        url: () => 'ws://x/v1/ws', WebSocket: FakeSocket, version: '9', onMessage: m => messages.push(m), onState: s => states.push(s),
        backoff: { base: 10, max: 40, random: () => 1 }, pingMs: 1000000, timers: clock,
    });
    ch.start();
    const s1 = FakeSocket.instances[0];
    s1.open();
    assert.deepEqual(s1.sent[0], { type: 'hello', client: 'st-extension', version: '9' });
    s1.message({ type: 'progress', task: 'extract', done: 1, total: 4 });
    s1.message('not json');
    assert.deepEqual(messages, [{ type: 'progress', task: 'extract', done: 1, total: 4 }]);

    s1.drop();
    assert.equal(ch.state, 'closed');
    assert.deepEqual(clock.pending, [10], 'one retry, after the first backoff');
    assert.equal(FakeSocket.instances.length, 1, 'no reconnect before the backoff ends');
    clock.fireNext();
    assert.equal(FakeSocket.instances.length, 2, 'reconnected after the backoff');
    FakeSocket.instances[1].drop();
    assert.deepEqual(clock.pending, [20], 'the second retry waits longer');
    clock.fireNext();
    assert.equal(FakeSocket.instances.length, 3);
    FakeSocket.instances[2].drop();
    assert.deepEqual(clock.pending, [40]);

    ch.stop();
    assert.deepEqual(clock.pending, [], 'a stopped channel has no retry scheduled');
    assert.equal(FakeSocket.instances.length, 3);
    assert.deepEqual(states.slice(0, 3), ['connecting', 'open', 'closed']);
});

test('an open socket resets the backoff', () => {
    FakeSocket.instances = [];
    const clock = new ManualClock();
    const ch = new LiveChannel({ url: () => 'ws://x', WebSocket: FakeSocket, onMessage: () => {}, backoff: { base: 10, max: 40, random: () => 1 }, pingMs: 1000000, timers: clock });
    ch.start();
    FakeSocket.instances[0].drop();
    clock.fireNext();
    FakeSocket.instances[1].open();
    FakeSocket.instances[1].drop();
    assert.deepEqual(clock.pending, [10]);
    ch.stop();
});

test('no url (proxy route) means no socket, but it keeps checking', () => {
    FakeSocket.instances = [];
    const clock = new ManualClock();
    let url = null;
    const ch = new LiveChannel({ url: () => url, WebSocket: FakeSocket, onMessage: () => {}, backoff: { base: 10, max: 10, random: () => 1 }, timers: clock });
    ch.start();
    assert.equal(FakeSocket.instances.length, 0);
    assert.deepEqual(clock.pending, [10], 'checks again later');
    url = 'ws://y';
    clock.fireNext();
    assert.equal(FakeSocket.instances.length, 1);
    ch.stop();
});

test('a throwing handler does not kill the channel', () => {
    FakeSocket.instances = [];
    const ch = new LiveChannel({ url: () => 'ws://x', WebSocket: FakeSocket, onMessage: () => { throw new Error('ui'); }, pingMs: 1000000, timers: new ManualClock() });
    const origError = console.error;
    console.error = () => {};
    try {
        ch.start();
        FakeSocket.instances[0].open();
        FakeSocket.instances[0].message({ type: 'notice' });
        assert.equal(ch.state, 'open');
    } finally {
        console.error = origError;
        ch.stop();
    }
});
