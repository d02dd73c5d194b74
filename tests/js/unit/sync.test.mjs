import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ChainCache, ChatSyncer, SyncError, anchorIndexes, buildSyncRequest, planSyncStart, wireMessage } from '../../../st_extension/lib/sync.js';
import { chainHash, messageHash } from '../../../st_extension/lib/hash.js';
import { FakeSyncServer } from './fake_sync_server.mjs';

function makeChat(n, prefix = 'm') {
    return Array.from({ length: n }, (_, i) => ({
        name: i % 2 ? 'Elena' : 'Alex', is_user: i % 2 === 0, is_system: false, mes: `${prefix} ${i}`, swipe_id: 0, send_date: `d${i}`,
    }));
}

function fullChains(chat) {
    let prev = '';
    return chat.map(m => (prev = chainHash(prev, messageHash(m.is_user ? 'user' : m.is_system ? 'system' : 'assistant', m.name ?? '', m.mes))));
}

function setup(options = {}) {
    const server = new FakeSyncServer(options);
    const syncer = new ChatSyncer({ send: async (chatId, body) => server.sync(chatId, body), ...options });
    return { server, syncer };
}

test('anchors: slice_start - 1 plus length - 1 - 2^j before the slice', () => {
    assert.deepEqual(anchorIndexes(120, 118), [117, 115, 111, 103, 87, 55]);
    assert.deepEqual(anchorIndexes(10, 0), []);
    assert.deepEqual(anchorIndexes(1, 1), [0]);
    assert.deepEqual(anchorIndexes(5, 5), [4, 3, 2, 0]);
    for (const [len, start] of [[1000, 990], [3, 1], [64, 10]]) {
        const a = anchorIndexes(len, start);
        assert.ok(a.every(i => i >= 0 && i < start), `${len}/${start}`);
        assert.equal(a[0], start - 1);
        assert.equal(new Set(a).size, a.length);
    }
});

test('wire messages carry index, role, name, text, swipe_id and send_date', () => {
    assert.deepEqual(wireMessage({ is_user: true, name: 'Alex', mes: 'hi', swipe_id: 2, send_date: 5 }, 7),
        { index: 7, role: 'user', name: 'Alex', text: 'hi', swipe_id: 2, send_date: '5' });
    assert.deepEqual(wireMessage({ mes: 'x' }, 0), { index: 0, role: 'assistant', name: '', text: 'x', swipe_id: 0, send_date: '' });
});

test('chain cache recomputes only from the first change and equals a full computation', () => {
    const chat = makeChat(30);
    const cache = new ChainCache();
    assert.deepEqual(cache.update(chat).chains, fullChains(chat));
    chat[12].mes = 'edited';
    assert.deepEqual(cache.update(chat).chains, fullChains(chat));
    chat.length = 20;
    assert.deepEqual(cache.update(chat).chains, fullChains(chat));
    chat.push({ is_user: true, name: 'Alex', mes: 'new' });
    const snap = cache.update(chat);
    assert.deepEqual(snap.chains, fullChains(chat));
    chat[0].mes = 'changed after the snapshot';
    assert.equal(snap.parts[0].text, 'm 0', 'a snapshot does not follow later mutation');
});

test('sync request for a tail slice', () => {
    const chat = makeChat(10);
    const snap = new ChainCache().update(chat);
    const body = buildSyncRequest(snap, 8, 10);
    assert.equal(body.length, 10);
    assert.deepEqual(body.messages.map(m => m.index), [8, 9]);
    assert.deepEqual(body.anchors.map(a => a.index), [7, 5, 1]);
    assert.equal(body.anchors[0].chain, snap.chains[7]);
});

test('plan: unchanged chat sends nothing, changes start at the first difference', () => {
    const a = fullChains(makeChat(10));
    assert.equal(planSyncStart(null, a), 6);
    assert.equal(planSyncStart(a, a), null);
    assert.equal(planSyncStart(a, a, { force: true }), 9);
    const edited = makeChat(10);
    edited[3].mes = 'x';
    assert.equal(planSyncStart(a, fullChains(edited)), 3);
    assert.equal(planSyncStart(a, a.slice(0, 7)), 6, 'a delete resends the new last message');
    assert.equal(planSyncStart(a, []), 0);
});

test('a new chat is pulled in full via need_more, then only the tail is sent', async () => {
    const { server, syncer } = setup();
    const chat = makeChat(25);
    const r1 = await syncer.sync('c1', chat);
    assert.equal(r1.status, 'synced');
    assert.equal(r1.requests, 2);
    assert.deepEqual(server.stored('c1').chains, fullChains(chat));
    assert.equal(server.requests[1].body.messages[0].index, 0);

    chat.push({ is_user: true, name: 'Alex', mes: 'The vault code is 4417' });
    const r2 = await syncer.sync('c1', chat);
    assert.equal(r2.requests, 1);
    assert.deepEqual(server.requests.at(-1).body.messages.map(m => m.index), [25]);
    assert.deepEqual(server.stored('c1').chains, fullChains(chat));

    assert.equal((await syncer.sync('c1', chat)).status, 'unchanged');
});

test('edit, delete and swipe converge; the sidecar reports where it diverged', async () => {
    const { server, syncer } = setup();
    const chat = makeChat(40);
    await syncer.sync('c', chat);

    chat[17].mes = 'edited in the middle';
    let r = await syncer.sync('c', chat);
    assert.equal(r.response.diverged_at, 17);
    assert.equal(server.requests.at(-1).body.messages[0].index, 17);
    assert.deepEqual(server.stored('c').chains, fullChains(chat));

    chat.length = 30; // delete messages 30..39
    r = await syncer.sync('c', chat);
    assert.equal(r.response.diverged_at, 30);
    assert.deepEqual(server.stored('c').chains, fullChains(chat));

    chat[29] = { ...chat[29], mes: 'swiped variant', swipe_id: 1 };
    r = await syncer.sync('c', chat);
    assert.equal(r.response.diverged_at, 29);
    assert.equal(server.requests.at(-1).body.messages[0].swipe_id, 1);
    assert.deepEqual(server.stored('c').chains, fullChains(chat));
});

test('a sidecar that lost the chat (or a different sidecar) is refilled', async () => {
    const { server, syncer } = setup();
    const chat = makeChat(12);
    await syncer.sync('c', chat);
    server.chats.clear();
    chat.push({ is_user: true, name: 'Alex', mes: 'hello again' });
    const r = await syncer.sync('c', chat);
    assert.equal(r.status, 'synced');
    assert.deepEqual(server.stored('c').chains, fullChains(chat));
});

test('long chats are sent in chunks no larger than maxChunk', async () => {
    const { server, syncer } = setup({ maxChunk: 7 });
    const chat = makeChat(50);
    const r = await syncer.sync('long', chat);
    assert.equal(r.status, 'synced');
    assert.ok(server.requests.every(q => q.body.messages.length <= 7));
    assert.deepEqual(server.stored('long').chains, fullChains(chat));
});

test('an emptied chat syncs as length 0', async () => {
    const { server, syncer } = setup();
    const chat = makeChat(5);
    await syncer.sync('c', chat);
    chat.length = 0;
    const r = await syncer.sync('c', chat);
    assert.equal(r.status, 'synced');
    assert.equal(server.stored('c').chains.length, 0);
});

test('system messages are synced with role system', async () => {
    const { server, syncer } = setup();
    const chat = makeChat(4);
    chat.push({ is_system: true, name: 'SillyTavern System', mes: 'hidden note' });
    await syncer.sync('c', chat);
    assert.equal(server.stored('c').messages[4].role, 'system');
});

test('stops when the user left the chat between requests', async () => {
    const { syncer } = setup();
    let current = true;
    const chat = makeChat(30);
    const origSend = syncer.send;
    syncer.send = async (...args) => { const r = await origSend(...args); current = false; return r; };
    const r = await syncer.sync('c', chat, { isCurrent: () => current });
    assert.equal(r.status, 'stale');
});

test('errors and a looping sidecar raise SyncError', async () => {
    const bad = new ChatSyncer({ send: async () => ({ ok: false, error: 'boom', status: 500 }) });
    await assert.rejects(bad.sync('c', makeChat(3)), SyncError);
    const looping = new ChatSyncer({ send: async () => ({ ok: true, status: 'need_more', need_from: 0 }) });
    await assert.rejects(looping.sync('c', makeChat(3)), /keeps asking/);
    const wild = new ChatSyncer({ send: async () => ({ ok: true, status: 'need_more', need_from: 99 }) });
    await assert.rejects(wild.sync('c', makeChat(3)), /asked for messages from 99/);
    const odd = new ChatSyncer({ send: async () => ({ ok: true, status: 'weird' }) });
    await assert.rejects(odd.sync('c', makeChat(3)), /unexpected sync status/);
});
