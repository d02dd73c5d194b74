import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ApiError, PROXY_TOKEN_HEADER, SidecarClient, queryString } from '../../../st_extension/lib/client.js';

/** A scripted fetch: `routes` maps a URL prefix to a handler returning {status, body} or throwing. */
function fakeFetch(routes) {
    const calls = [];
    const fn = async (url, init = {}) => {
        calls.push({ url, ...init });
        for (const [prefix, handler] of Object.entries(routes)) {
            if (url.startsWith(prefix)) {
                const r = await handler(url, init);
                const text = typeof r.body === 'string' ? r.body : JSON.stringify(r.body);
                return { ok: r.status >= 200 && r.status < 300, status: r.status, text: async () => text };
            }
        }
        throw new TypeError('Failed to fetch');
    };
    fn.calls = calls;
    return fn;
}

test('query strings skip empty values and encode', () => {
    assert.equal(queryString({ offset: 0, q: 'a b&c', type: '', archived: false, x: null }), '?offset=0&q=a%20b%26c&archived=false');
    assert.equal(queryString({}), '');
});

test('direct calls send the bearer token, JSON body and encode chat ids', async () => {
    const fetch = fakeFetch({ 'http://side:1/': () => ({ status: 200, body: { ok: true, status: 'synced' } }) });
    const client = new SidecarClient({ baseUrl: 'http://side:1/', mode: 'direct', token: 't0k', fetch });
    await client.sync('Elena - 2024/10/1 @12h', { length: 0, messages: [], anchors: [] });
    const call = fetch.calls[0];
    assert.equal(call.url, 'http://side:1/v1/chats/Elena%20-%202024%2F10%2F1%20%4012h/sync');
    assert.equal(call.method, 'POST');
    assert.equal(call.headers.Authorization, 'Bearer t0k');
    assert.equal(call.headers['Content-Type'], 'application/json');
    assert.deepEqual(JSON.parse(call.body), { length: 0, messages: [], anchors: [] });
    await client.health();
    assert.equal(fetch.calls[1].body, undefined);
    assert.ok(!('Content-Type' in fetch.calls[1].headers));
});

test('auto mode falls back to the proxy plugin when the direct URL is unreachable, and sticks to it', async () => {
    const fetch = fakeFetch({
        '/api/plugins/stbme/': () => ({ status: 200, body: { ok: true, version: '1' } }),
    });
    const client = new SidecarClient({ baseUrl: 'http://127.0.0.1:8765', fetch, token: 'sec', proxyHeaders: () => ({ 'Content-Type': 'application/json', 'X-CSRF-Token': 'csrf' }) });
    const health = await client.health();
    assert.equal(health.version, '1');
    assert.equal(client.route, 'proxy');
    assert.deepEqual(fetch.calls.map(c => c.url), ['http://127.0.0.1:8765/health', '/api/plugins/stbme/health']);
    const proxied = fetch.calls[1];
    assert.equal(proxied.headers['X-CSRF-Token'], 'csrf');
    assert.equal(proxied.headers[PROXY_TOKEN_HEADER], 'sec');
    assert.ok(!('Authorization' in proxied.headers), 'ST may use Basic auth itself: never send our own Authorization to ST');
    assert.ok(!('Content-Type' in proxied.headers), 'no body, no content type');
    await client.status('c');
    assert.equal(fetch.calls[2].url, '/api/plugins/stbme/v1/chats/c/status', 'the working route is tried first next time');
});

test('auto mode takes the plugin when the sidecar refuses the direct route because ST has user accounts', async () => {
    const refusal = { ok: false, error: 'SillyTavern runs with user accounts ...', errors: ['...'], status: 403, field: 'X-STBME-Account' };
    const fetch = fakeFetch({
        'http://127.0.0.1:8765/health': () => ({ status: 200, body: { ok: true, version: 'direct' } }),
        'http://127.0.0.1:8765/': () => ({ status: 403, body: refusal }),
        '/api/plugins/stbme/': () => ({ status: 200, body: { ok: true, chats: [] } }),
    });
    const client = new SidecarClient({ baseUrl: 'http://127.0.0.1:8765', fetch });
    assert.equal((await client.health()).version, 'direct');
    assert.deepEqual((await client.get('/v1/chats')).chats, []);
    assert.equal(client.route, 'proxy');
    assert.deepEqual(fetch.calls.map(c => c.url).slice(1), ['http://127.0.0.1:8765/v1/chats', '/api/plugins/stbme/v1/chats']);
    // Chosen by hand, the direct route reports the refusal as it is.
    const direct = new SidecarClient({ baseUrl: 'http://127.0.0.1:8765', mode: 'direct', fetch });
    await assert.rejects(direct.get('/v1/chats'), e => e instanceof ApiError && e.status === 403 && e.field === 'X-STBME-Account');
});

test('a missing plugin (ST answers 404 HTML) is reported as unreachable, not as a sidecar error', async () => {
    const fetch = fakeFetch({ '/api/plugins/stbme/': () => ({ status: 404, body: '<html>Cannot GET</html>' }) });
    const client = new SidecarClient({ baseUrl: 'http://127.0.0.1:8765', fetch, mode: 'proxy' });
    await assert.rejects(client.health(), e => e instanceof ApiError && e.network && e.status === 404 && /not installed/.test(e.message));
});

test('HTTP errors from the sidecar carry status and field and do not fall through to the other route', async () => {
    const fetch = fakeFetch({
        'http://s/': () => ({ status: 400, body: { ok: false, error: "setting 'recall.budget_tokens': 1 is below the minimum 50", errors: [], status: 400, field: 'recall.budget_tokens' } }),
        '/api/plugins/stbme/': () => { throw new Error('must not be called'); },
    });
    const client = new SidecarClient({ baseUrl: 'http://s', fetch });
    await assert.rejects(client.putSettings({ 'recall.budget_tokens': 1 }), e => e.status === 400 && e.field === 'recall.budget_tokens' && /minimum/.test(e.message));
    assert.equal(fetch.calls.length, 1);
    assert.deepEqual(JSON.parse(fetch.calls[0].body), { settings: { 'recall.budget_tokens': 1 } });
    assert.equal(fetch.calls[0].method, 'PUT');
});

test('an aborted request is not retried on the other route', async () => {
    const fetch = async (url, init) => new Promise((_, reject) => init.signal.addEventListener('abort', () => reject(new DOMException('aborted', 'AbortError'))));
    const client = new SidecarClient({ baseUrl: 'http://s', fetch });
    const controller = new AbortController();
    const pending = client.recall('c', { query: 'x' }, { signal: controller.signal });
    controller.abort();
    await assert.rejects(pending, /aborted/);
});

test('the default request timeout aborts a hanging call', async () => {
    const fetch = async (url, init) => new Promise((_, reject) => init.signal.addEventListener('abort', () => reject(init.signal.reason)));
    const client = new SidecarClient({ baseUrl: 'http://s', fetch, mode: 'direct', timeoutMs: 30 });
    await assert.rejects(client.health(), /timed out/);
});

test('node, import, export and reindex endpoints', async () => {
    const fetch = fakeFetch({ 'http://s/': () => ({ status: 200, body: { ok: true } }) });
    const client = new SidecarClient({ baseUrl: 'http://s', fetch, mode: 'direct' });
    await client.nodes('c', { offset: 20, limit: 20, q: 'vault', archived: true });
    await client.nodeAction('c', 'n_1', 'pin');
    await client.patchNode('c', 'n_1', { fields: { summary: 'x' }, unlock: true });
    await client.createNode('c', { text: 'remember me' });
    await client.importChat('c', { nodes: [], edges: [] }, 'replace');
    await client.exportChat('c');
    await client.reindex('c');
    await client.deleteChat('c');
    await client.putChatSettings('c', { 'inject.depth': null });
    assert.throws(() => client.nodeAction('c', 'n_1', 'explode'), /unknown node action/);
    assert.deepEqual(fetch.calls.map(c => `${c.method} ${c.url}`), [
        'GET http://s/v1/chats/c/nodes?offset=20&limit=20&q=vault&archived=true',
        'POST http://s/v1/chats/c/nodes/n_1/pin',
        'PATCH http://s/v1/chats/c/nodes/n_1',
        'POST http://s/v1/chats/c/nodes',
        'POST http://s/v1/chats/c/import?mode=replace',
        'GET http://s/v1/chats/c/export',
        'POST http://s/v1/chats/c/reindex',
        'DELETE http://s/v1/chats/c',
        'PUT http://s/v1/chats/c/settings',
    ]);
    assert.deepEqual(JSON.parse(fetch.calls.at(-1).body), { settings: { 'inject.depth': null } });
});

test('websocket url follows the base url and token', () => {
    assert.equal(new SidecarClient({ baseUrl: 'http://127.0.0.1:8765' }).wsUrl(), 'ws://127.0.0.1:8765/v1/ws');
    assert.equal(new SidecarClient({ baseUrl: 'https://h:1', token: 'a b' }).wsUrl(), 'wss://h:1/v1/ws?token=a%20b');
});
