// The ST server plugin, mounted the way ST's src/plugin-loader.js does it: an express Router passed to
// init(router), then app.use(`/api/plugins/${info.id}`, router). A tiny fake upstream plays the sidecar.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { createRequire } from 'node:module';
import express from 'express';
import { SidecarClient } from '../../../st_extension/lib/client.js';

const require = createRequire(import.meta.url);
const pluginPath = '../../../st_extension/server-plugin/index.cjs';

let upstream, upstreamUrl, st, stUrl, stParsed, stParsedUrl;
const seen = [];

function listen(server) {
    return new Promise(resolve => server.listen(0, '127.0.0.1', () => resolve(`http://127.0.0.1:${server.address().port}`)));
}

async function mountPlugin(app) {
    // plugin-loader.js: `const plugin = await import(fileUrl)`, info/init from plugin or plugin.default
    const plugin = await import(new URL(pluginPath, import.meta.url));
    const info = plugin.info || plugin.default?.info;
    const init = plugin.init || plugin.default?.init;
    assert.equal(info.id, 'stbme');
    assert.match(info.id, /^[a-z0-9_-]+$/);
    for (const field of ['id', 'name', 'description']) assert.equal(typeof info[field], 'string');
    const router = express.Router();
    await init(router);
    assert.ok(router.stack.length > 0);
    app.use(`/api/plugins/${info.id}`, router);
}

before(async () => {
    upstream = http.createServer((req, res) => {
        let body = '';
        req.on('data', c => { body += c; });
        req.on('end', () => {
            seen.push({ method: req.method, url: req.url, headers: req.headers, body });
            if (req.url === '/v1/boom') {
                res.writeHead(400, { 'content-type': 'application/json' });
                res.end(JSON.stringify({ ok: false, error: 'bad value', status: 400, field: 'recall.budget_tokens' }));
                return;
            }
            res.writeHead(200, { 'content-type': 'application/json' });
            res.end(JSON.stringify({ ok: true, method: req.method, url: req.url, body: body ? JSON.parse(body) : null }));
        });
    });
    upstreamUrl = await listen(upstream);
    process.env.STBME_SIDECAR_URL = upstreamUrl;
    process.env.STBME_TOKEN = 'from-config';

    // ST without the CORS proxy: no global body parser, the plugin streams the body.
    const app = express();
    app.use((req, res, next) => { req.headers.cookie = 'session=secret'; next(); });
    await mountPlugin(app);
    st = app.listen(0, '127.0.0.1');
    await new Promise(r => st.once('listening', r));
    stUrl = `http://127.0.0.1:${st.address().port}`;

    // ST with enableCorsProxy: true applies bodyParser.json globally (server.js:298-302): the stream is spent.
    const app2 = express();
    app2.use(express.json({ limit: '200mb' }));
    await mountPlugin(app2);
    stParsed = app2.listen(0, '127.0.0.1');
    await new Promise(r => stParsed.once('listening', r));
    stParsedUrl = `http://127.0.0.1:${stParsed.address().port}`;
});

after(() => {
    upstream?.close();
    st?.close();
    stParsed?.close();
    delete process.env.STBME_SIDECAR_URL;
    delete process.env.STBME_TOKEN;
});

test('GET is forwarded with the path and query, no cookies, token from the config', async () => {
    const res = await fetch(`${stUrl}/api/plugins/stbme/v1/chats/a%2Fb%20c/nodes?offset=0&q=vault`, { headers: { 'X-CSRF-Token': 'csrf' } });
    assert.equal(res.status, 200);
    const data = await res.json();
    assert.equal(data.url, '/v1/chats/a%2Fb%20c/nodes?offset=0&q=vault');
    const req = seen.at(-1);
    assert.equal(req.headers.authorization, 'Bearer from-config');
    assert.equal(req.headers.cookie, undefined);
    assert.equal(req.headers['x-csrf-token'], undefined);
});

test('the browser token header wins and becomes a bearer token upstream', async () => {
    await fetch(`${stUrl}/api/plugins/stbme/health`, { headers: { 'X-Stbme-Token': 'from-browser' } });
    assert.equal(seen.at(-1).headers.authorization, 'Bearer from-browser');
    assert.equal(seen.at(-1).headers['x-stbme-token'], undefined);
});

for (const [label, base] of [['streamed body', () => stUrl], ['body already parsed by ST', () => stParsedUrl]]) {
    test(`POST, PUT, PATCH and DELETE are forwarded (${label})`, async () => {
        const payload = { length: 2, messages: [{ index: 1, text: '你好 😀' }], anchors: [] };
        for (const method of ['POST', 'PUT', 'PATCH']) {
            const res = await fetch(`${base()}/api/plugins/stbme/v1/chats/c/sync`, { method, headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(payload) });
            const data = await res.json();
            assert.equal(data.method, method);
            assert.deepEqual(data.body, payload);
        }
        const del = await fetch(`${base()}/api/plugins/stbme/v1/chats/c`, { method: 'DELETE' });
        assert.equal((await del.json()).method, 'DELETE');
    });
}

test('the ST account (req.user) is named to the sidecar; a browser cannot name one', async () => {
    // ST's setUserDataMiddleware runs before every plugin route and sets req.user.
    const app = express();
    app.use((req, res, next) => {
        req.user = { profile: { handle: decodeURIComponent(req.get('x-test-login') || '') }, directories: {} };
        next();
    });
    await mountPlugin(app);
    const server = app.listen(0, '127.0.0.1');
    await new Promise(r => server.once('listening', r));
    const base = `http://127.0.0.1:${server.address().port}/api/plugins/stbme`;
    try {
        for (const handle of ['alice', '../../etc/x', '灯塔 ユーザー']) {
            await fetch(`${base}/v1/chats`, { headers: { 'X-Test-Login': encodeURIComponent(handle), 'X-STBME-Account': 'bob' } });
            assert.equal(decodeURIComponent(seen.at(-1).headers['x-stbme-account']), decodeURIComponent(encodeURIComponent(handle)));
        }
        const info = await (await fetch(`${base}/_proxy/info`, { headers: { 'X-Test-Login': 'alice' } })).json();
        assert.equal(info.account, 'alice');
    } finally {
        server.close();
    }
    // Without a login (no req.user), a browser's header is dropped, not forwarded.
    await fetch(`${stUrl}/api/plugins/stbme/v1/chats`, { headers: { 'X-STBME-Account': 'bob' } });
    assert.equal(seen.at(-1).headers['x-stbme-account'], undefined);
});

test('sidecar errors pass through unchanged', async () => {
    const res = await fetch(`${stUrl}/api/plugins/stbme/v1/boom`);
    assert.equal(res.status, 400);
    assert.equal((await res.json()).field, 'recall.budget_tokens');
});

test('only the sidecar API is reachable', async () => {
    for (const p of ['/admin', '/v1/../admin', '/', '/healthz']) {
        const res = await fetch(`${stUrl}/api/plugins/stbme${p}`);
        assert.equal(res.status, 404, p);
    }
    const res = await fetch(`${stUrl}/api/plugins/stbme/v1/x`, { method: 'OPTIONS' });
    assert.notEqual(res.status, 200);
});

test('info route names the upstream', async () => {
    const data = await (await fetch(`${stUrl}/api/plugins/stbme/_proxy/info`)).json();
    assert.equal(data.plugin, 'stbme');
    assert.equal(data.sidecar, upstreamUrl);
});

test('a dead sidecar gives a 502 the extension recognises', async () => {
    const { createProxyHandler } = require(pluginPath);
    const app = express();
    app.use('/api/plugins/stbme', createProxyHandler({ sidecarUrl: 'http://127.0.0.1:9', token: '', timeoutMs: 2000 }));
    const server = app.listen(0, '127.0.0.1');
    await new Promise(r => server.once('listening', r));
    try {
        const base = `http://127.0.0.1:${server.address().port}`;
        const res = await fetch(`${base}/api/plugins/stbme/health`);
        assert.equal(res.status, 502);
        const data = await res.json();
        assert.equal(data.ok, false);
        assert.equal(data.proxy, true);
        assert.match(data.error, /cannot reach the sidecar/);
        // the extension's client treats it as "route unreachable" and falls back to the direct URL
        const client = new SidecarClient({ baseUrl: upstreamUrl, mode: 'auto', proxyBase: `${base}/api/plugins/stbme` });
        client.route = 'proxy';
        const health = await client.health();
        assert.equal(health.ok, true);
        assert.equal(client.route, 'direct');
    } finally {
        server.close();
    }
});

test('the extension client works end to end through the plugin', async () => {
    const client = new SidecarClient({ baseUrl: 'http://127.0.0.1:9', mode: 'auto', proxyBase: `${stUrl}/api/plugins/stbme`, token: 'tok', proxyHeaders: () => ({ 'Content-Type': 'application/json', 'X-CSRF-Token': 'x' }) });
    const res = await client.sync('Elena - 1', { length: 1, messages: [], anchors: [] });
    assert.equal(client.route, 'proxy');
    assert.equal(res.url, '/v1/chats/Elena%20-%201/sync');
    assert.equal(seen.at(-1).headers.authorization, 'Bearer tok');
});

test('config.json is read when no environment variable is set', async () => {
    const { loadConfig } = require(pluginPath);
    const fs = await import('node:fs');
    const os = await import('node:os');
    const path = await import('node:path');
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'stbme-plugin-'));
    fs.writeFileSync(path.join(dir, 'config.json'), JSON.stringify({ sidecarUrl: 'http://192.168.1.5:8765/', token: 't', timeoutMs: 5000 }));
    const saved = { ...process.env };
    delete process.env.STBME_SIDECAR_URL;
    delete process.env.STBME_TOKEN;
    try {
        assert.deepEqual(loadConfig(dir), { sidecarUrl: 'http://192.168.1.5:8765', token: 't', timeoutMs: 5000, mountAs: 'stbme' });
        assert.deepEqual(loadConfig(path.join(dir, 'missing')), { sidecarUrl: 'http://127.0.0.1:8765', token: '', timeoutMs: 120000, mountAs: 'stbme' });
    } finally {
        Object.assign(process.env, saved);
        fs.rmSync(dir, { recursive: true });
    }
});

test('the Authority session header reaches the sidecar on Authority paths only', async () => {
    const headers = { 'Content-Type': 'application/json', 'x-authority-session-token': 'sess-1', 'X-CSRF-Token': 'c' };
    const res = await fetch(`${stUrl}/api/plugins/stbme/v1/authority/sql/query`, { method: 'POST', headers, body: '{"statement":"x"}' });
    assert.equal((await res.json()).url, '/v1/authority/sql/query');
    assert.equal(seen.at(-1).headers['x-authority-session-token'], 'sess-1');
    assert.equal(seen.at(-1).headers.authorization, 'Bearer from-config');
    assert.equal(seen.at(-1).headers['x-csrf-token'], undefined);
    await fetch(`${stUrl}/api/plugins/stbme/v1/chats/c/status`, { headers });
    assert.equal(seen.at(-1).headers['x-authority-session-token'], undefined);
    // GET with the session header (jobs/{id}, session/current)
    await fetch(`${stParsedUrl}/api/plugins/stbme/v1/authority/jobs/12`, { headers });
    assert.equal(seen.at(-1).url, '/v1/authority/jobs/12');
    assert.equal(seen.at(-1).headers['x-authority-session-token'], 'sess-1');
});

test('a copy configured with mountAs "authority" is the plugin ST-BME looks for by default', async () => {
    const fs = await import('node:fs');
    const os = await import('node:os');
    const path = await import('node:path');
    // installed the way a user does it: a second copy of the folder, with its own config.json
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'stbme-authority-plugin-'));
    fs.copyFileSync(new URL(pluginPath, import.meta.url), path.join(dir, 'index.cjs'));
    fs.writeFileSync(path.join(dir, 'config.json'), JSON.stringify({ mountAs: 'authority' }));
    let server;
    try {
        const plugin = require(path.join(dir, 'index.cjs'));
        assert.equal(plugin.info.id, 'authority');
        const router = express.Router();
        await plugin.init(router);
        const app = express();
        app.use(`/api/plugins/${plugin.info.id}`, router);
        server = app.listen(0, '127.0.0.1');
        await new Promise(r => server.once('listening', r));
        const base = `http://127.0.0.1:${server.address().port}/api/plugins/authority`;
        const res = await fetch(`${base}/trivium/search-hybrid`, { method: 'POST', headers: { 'Content-Type': 'application/json', 'x-authority-session-token': 's2' }, body: '{"topK":3}' });
        const data = await res.json();
        assert.equal(data.url, '/v1/authority/trivium/search-hybrid');
        assert.deepEqual(data.body, { topK: 3 });
        assert.equal(seen.at(-1).headers['x-authority-session-token'], 's2');
        await fetch(`${base}/probe`, { method: 'POST' });
        assert.equal(seen.at(-1).url, '/v1/authority/probe');
        for (const p of ['/../../v1/chats', '/a/../../health']) {
            const bad = await fetch(`${base}${p}`);
            assert.notEqual(seen.at(-1).url, '/v1/chats');
            assert.ok(bad.status === 404 || (await bad.json()).url?.startsWith('/v1/authority/'), p);
        }
    } finally {
        server?.close();
        fs.rmSync(dir, { recursive: true });
    }
});
