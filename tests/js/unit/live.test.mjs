import { test } from 'node:test';
import assert from 'node:assert/strict';
import { LiveChannel } from '../../../st_extension/lib/live.js';

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

const wait = ms => new Promise(r => setTimeout(r, ms));

test('connects, says hello, delivers messages and reconnects with backoff', async () => {
    FakeSocket.instances = [];
    const messages = [];
    const states = [];
    const ch = new LiveChannel({
        url: () => 'ws://x/v1/ws', WebSocket: FakeSocket, version: '9', onMessage: m => messages.push(m), onState: s => states.push(s),
        backoff: { base: 10, max: 40, random: () => 1 }, pingMs: 1000000,
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
    await wait(30);
    assert.equal(FakeSocket.instances.length, 2, 'reconnected after the backoff');
    FakeSocket.instances[1].drop();
    await wait(15);
    assert.equal(FakeSocket.instances.length, 2, 'second retry waits longer');
    await wait(30);
    assert.equal(FakeSocket.instances.length, 3);
    ch.stop();
    await wait(60);
    assert.equal(FakeSocket.instances.length, 3, 'stopped channels stay down');
    assert.deepEqual(states.slice(0, 3), ['connecting', 'open', 'closed']);
});

test('no url (proxy route) means no socket, but it keeps checking', async () => {
    FakeSocket.instances = [];
    let url = null;
    const ch = new LiveChannel({ url: () => url, WebSocket: FakeSocket, onMessage: () => {}, backoff: { base: 10, max: 10, random: () => 1 } });
    ch.start();
    assert.equal(FakeSocket.instances.length, 0);
    url = 'ws://y';
    await wait(30);
    assert.equal(FakeSocket.instances.length, 1);
    ch.stop();
});

test('a throwing handler does not kill the channel', () => {
    FakeSocket.instances = [];
    const ch = new LiveChannel({ url: () => 'ws://x', WebSocket: FakeSocket, onMessage: () => { throw new Error('ui'); }, pingMs: 1000000 });
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
