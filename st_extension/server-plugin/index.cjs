// SillyTavern server plugin "stbme": forwards /api/plugins/stbme/<path> to the ST-BME sidecar, so a browser
// that cannot reach the sidecar directly (ST opened from a phone, sidecar on the PC's 127.0.0.1) still can.
//
// ST's plugin loader (src/plugin-loader.js) imports this module, reads `info` {id, name, description},
// calls `init(router)` with an express Router mounted at /api/plugins/stbme, and `exit()` on shutdown.
// The router sits behind ST's own login, whitelist and CSRF checks, so only ST's users reach it.
//
// Configuration (first match wins):
//   env STBME_SIDECAR_URL / STBME_TOKEN / STBME_PROXY_TIMEOUT_MS
//   config.json next to this file: {"sidecarUrl": "http://127.0.0.1:8765", "token": "", "timeoutMs": 120000}
//
// The sidecar also serves the original ST-BME extension's "Authority" storage protocol under /v1/authority
// (docs/authority.md). Point ST-BME's Authority base URL at /api/plugins/stbme/v1/authority, or install a
// second copy of this folder (say plugins/authority/) whose config.json says {"mountAs": "authority"}: that
// copy registers as the plugin "authority", so ST-BME's default /api/plugins/authority reaches the sidecar's
// /v1/authority with no setting changed. `mountAs` is read from config.json only (an environment variable
// would give both copies the same id). The Authority session header is forwarded on Authority paths.
//
// SillyTavern with user accounts (enableUserAccounts): ST's login sets req.user before any plugin route runs
// (src/users.js setUserDataMiddleware); the plugin names that account to the sidecar in X-STBME-Account
// (percent-encoded req.user.profile.handle), so each account has its own memory there (docs/security.md).
// The header is set here only: what a browser sends under that name is never forwarded.
// No dependencies beyond Node's standard library.

'use strict';

const fs = require('node:fs');
const http = require('node:http');
const https = require('node:https');
const path = require('node:path');

const VERSION = '0.1.0';
const TOKEN_HEADER = 'x-stbme-token';
const SESSION_HEADER = 'x-authority-session-token';
const ACCOUNT_HEADER = 'x-stbme-account';
const AUTHORITY_PREFIX = '/v1/authority';
const ALLOWED_METHODS = new Set(['GET', 'POST', 'PUT', 'PATCH', 'DELETE']);
/** Only the sidecar's API is reachable through ST, nothing else on that host. */
const ALLOWED_PATH = /^\/(health|v1\/[A-Za-z0-9._~%!$&'()*+,;=:@/-]*)$/;
/** As the "authority" plugin: any path below it, mapped below the sidecar's /v1/authority. */
const AUTHORITY_PATH = /^\/[A-Za-z0-9._~%!$&'()*+,;=:@/-]*$/;

/**
 * The plugin's identity for ST's loader: "stbme", or "authority" when config.json says so.
 * @param {string} mountAs
 */
function pluginInfo(mountAs) {
    if (mountAs === 'authority') {
        return {
            id: 'authority',
            name: 'ST-BME Sidecar (Authority bridge)',
            description: 'Serves /api/plugins/authority/* from the ST-BME memory sidecar\'s Authority bridge.',
        };
    }
    return {
        id: 'stbme',
        name: 'ST-BME Sidecar proxy',
        description: 'Forwards /api/plugins/stbme/* to the ST-BME memory sidecar (for browsers that cannot reach it directly).',
    };
}

/**
 * Read the plugin's settings from the environment and config.json.
 * @param {string} [dir] folder holding config.json
 * @returns {{sidecarUrl: string, token: string, timeoutMs: number, mountAs: string}}
 */
function loadConfig(dir = __dirname) {
    let file = {};
    try {
        file = JSON.parse(fs.readFileSync(path.join(dir, 'config.json'), 'utf8'));
    } catch (error) {
        if (error.code !== 'ENOENT') console.warn(`ST-BME proxy: ignoring config.json: ${error.message}`);
    }
    const sidecarUrl = String(process.env.STBME_SIDECAR_URL || file.sidecarUrl || 'http://127.0.0.1:8765').replace(/\/+$/, '');
    const token = String(process.env.STBME_TOKEN || file.token || '');
    const timeoutMs = Number(process.env.STBME_PROXY_TIMEOUT_MS || file.timeoutMs || 120000);
    const mountAs = file.mountAs === 'authority' ? 'authority' : 'stbme';
    return { sidecarUrl, token, timeoutMs: Number.isFinite(timeoutMs) && timeoutMs > 0 ? timeoutMs : 120000, mountAs };
}

const info = pluginInfo(loadConfig().mountAs);

/**
 * The ST account of a request: ST's own `default-user` when accounts are off, the logged-in one when on.
 * @param {import('express').Request} req
 * @returns {string|null}
 */
function accountOf(req) {
    const handle = req.user?.profile?.handle;
    return typeof handle === 'string' && handle ? handle : null;
}

function sendError(res, status, message) {
    if (res.headersSent) {
        res.destroy();
        return;
    }
    res.status(status).json({ ok: false, error: message, errors: [message], status, field: null, proxy: true });
}

/**
 * The express handler that forwards one request.
 * @param {{sidecarUrl: string, token: string, timeoutMs: number, mountAs?: string}} config
 */
function createProxyHandler(config) {
    const asAuthority = config.mountAs === 'authority';
    const upstream = new URL(config.sidecarUrl);
    const client = upstream.protocol === 'https:' ? https : http;
    const basePath = upstream.pathname.replace(/\/+$/, '');

    return function stbmeProxy(req, res) {
        // req.url is relative to the mount point (/api/plugins/stbme), query string included.
        const target = new URL(req.url, 'http://placeholder');
        const allowed = asAuthority ? AUTHORITY_PATH : ALLOWED_PATH;
        if (!ALLOWED_METHODS.has(req.method) || !allowed.test(target.pathname) || target.pathname.includes('..')) {
            sendError(res, 404, `not a sidecar API path: ${req.method} ${target.pathname}`);
            return;
        }
        const upstreamPath = (asAuthority ? AUTHORITY_PREFIX : '') + target.pathname;
        // Built from scratch: no header of the browser's reaches the sidecar unless listed here.
        const headers = { accept: 'application/json' };
        const account = accountOf(req);
        if (account) headers[ACCOUNT_HEADER] = encodeURIComponent(account);
        const token = req.get(TOKEN_HEADER) || config.token;
        if (token) headers.authorization = `Bearer ${token}`;
        // ST-BME's Authority client names its session in this header; the sidecar checks it after the token.
        const session = req.get(SESSION_HEADER);
        if (session && upstreamPath.startsWith(AUTHORITY_PREFIX + '/')) headers[SESSION_HEADER] = session;

        // ST parses JSON bodies globally when its CORS proxy is enabled (body-parser sets req._body);
        // then the stream is spent and the parsed body must be re-sent.
        let body = null;
        const hasBody = !['GET', 'HEAD'].includes(req.method);
        if (hasBody && req._body) {
            body = Buffer.from(JSON.stringify(req.body ?? {}), 'utf8');
            headers['content-type'] = 'application/json';
            headers['content-length'] = String(body.length);
        } else if (hasBody) {
            if (req.headers['content-type']) headers['content-type'] = req.headers['content-type'];
            if (req.headers['content-length']) headers['content-length'] = req.headers['content-length'];
            else headers['transfer-encoding'] = 'chunked';
        }

        const upstreamReq = client.request({
            protocol: upstream.protocol,
            hostname: upstream.hostname,
            port: upstream.port,
            method: req.method,
            path: basePath + upstreamPath + target.search,
            headers,
            timeout: config.timeoutMs,
        }, upstreamRes => {
            const out = {};
            for (const name of ['content-type', 'content-length', 'content-disposition']) {
                if (upstreamRes.headers[name]) out[name] = upstreamRes.headers[name];
            }
            res.writeHead(upstreamRes.statusCode || 502, out);
            upstreamRes.pipe(res);
        });
        upstreamReq.on('timeout', () => upstreamReq.destroy(new Error(`no answer within ${config.timeoutMs} ms`)));
        upstreamReq.on('error', error => {
            sendError(res, 502, `the ST-BME proxy cannot reach the sidecar at ${config.sidecarUrl}: ${error.message}`);
        });
        req.on('aborted', () => upstreamReq.destroy());

        if (!hasBody) upstreamReq.end();
        else if (body) upstreamReq.end(body);
        else req.pipe(upstreamReq);
    };
}

/**
 * Called by ST's plugin loader with an express Router mounted at /api/plugins/stbme.
 * @param {import('express').Router} router
 */
async function init(router) {
    const config = { ...loadConfig(), mountAs: info.id };
    router.get('/_proxy/info', (req, res) => {
        res.json({ ok: true, plugin: info.id, version: VERSION, sidecar: config.sidecarUrl, account: accountOf(req) });
    });
    router.use(createProxyHandler(config));
    const upstream = config.sidecarUrl + (info.id === 'authority' ? AUTHORITY_PREFIX : '');
    console.log(`ST-BME proxy: /api/plugins/${info.id}/ -> ${upstream}`);
}

async function exit() {
    // Nothing to close: every request's upstream connection ends with the request.
}

module.exports = { info, init, exit, loadConfig, createProxyHandler, pluginInfo, accountOf };
