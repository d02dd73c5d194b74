// Drives a real SillyTavern with the unmodified original ST-BME extension in headless Chromium, and checks
// that ST-BME keeps its graph and vectors in the sidecar (Authority bridge) and that its recall works.
// Started by scripts/st_check/run.sh, which sets up ST, the sidecar and the stand-in model first.
//
// Environment: ST_URL, SIDECAR_URL (the sidecar's root), MODEL_LOG (fake_model.py's log), OUT_DIR
// (screenshots, browser log), AUTHORITY_BASE_URL (optional: ST-BME's authorityBaseUrl; default: ST-BME's own
// default, /api/plugins/authority).
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const { chromium } = await import(path.join(here, '../../tests/js/node_modules/playwright-core/index.mjs'));
const ST = process.env.ST_URL || 'http://127.0.0.1:8000';
const SIDECAR = (process.env.SIDECAR_URL || 'http://127.0.0.1:8765') + '/v1/authority';
const MODEL_LOG = process.env.MODEL_LOG;
const OUT = process.env.OUT_DIR || '/tmp/st-check-out';
const BASE_URL = process.env.AUTHORITY_BASE_URL || '';
fs.mkdirSync(OUT, { recursive: true });
const log = fs.createWriteStream(path.join(OUT, 'browser.log'));
const sleep = ms => new Promise(r => setTimeout(r, ms));

async function waitFor(fn, what, timeoutMs = 120000) {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
        const value = await fn().catch(error => { log.write(`waiting for ${what}: ${error.message}\n`); return null; });
        if (value) return value;
        if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
        await sleep(500);
    }
}

/** The sidecar's Authority API, as a second client of ST-BME's extension id (reads only). */
let token = '';
async function authority(route, body) {
    const call = async () => fetch(SIDECAR + route, { method: 'POST', headers: { 'content-type': 'application/json', 'x-authority-session-token': token }, body: JSON.stringify(body) });
    if (!token) {
        const init = await fetch(SIDECAR + '/session/init', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ extensionId: 'third-party/st-bme', declaredPermissions: { sql: { private: true }, trivium: { private: true } } }) });
        token = (await init.json()).sessionToken;
    }
    return await (await call()).json();
}

function modelLog() {
    return fs.readFileSync(MODEL_LOG, 'utf8').split('\n').filter(Boolean).map(line => JSON.parse(line));
}

const browser = await chromium.launchPersistentContext(fs.mkdtempSync('/tmp/st-check-profile-'), {
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium', headless: true, viewport: { width: 1400, height: 1000 },
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
});
const page = browser.pages()[0] || await browser.newPage();
const calls = {};
const bases = new Set();
page.on('console', m => log.write(`[${m.type()}] ${m.text()}\n`));
page.on('pageerror', e => log.write(`[pageerror] ${e.message}\n`));
page.on('requestfinished', async request => {
    const match = request.url().match(/(\/api\/plugins\/(?:stbme\/v1\/authority|authority))\/([a-z/-]+)/);
    if (!match) return;
    bases.add(match[1]);
    const status = (await request.response())?.status();
    const key = `${match[2].replace(/\/\d+.*$/, '/{id}')} ${status}`;
    calls[key] = (calls[key] || 0) + 1;
});

async function openSt() {
    await page.goto(ST, { waitUntil: 'domcontentloaded' });
    await waitFor(() => page.evaluate(() => !!window.SillyTavern?.getContext && document.querySelectorAll('.character_select').length > 0), 'SillyTavern to load');
    await waitFor(() => page.evaluate(() => Object.keys(SillyTavern.getContext().extensionSettings.st_bme || {}).length > 50), 'ST-BME to load');
    await page.evaluate(() => $('#api_button_openai').trigger('click')); // "Connect": ST 1.12 does not auto-connect by default
    await sleep(3000);
}

const checks = [];
function check(name, ok, detail) {
    checks.push({ name, ok: Boolean(ok), detail });
    console.log(`${ok ? 'PASS' : 'FAIL'} ${name}${detail ? `: ${detail}` : ''}`);
}

try {
    await openSt();
    // ST 1.12 drops in-chat injections deeper than MAX_INJECTION_DEPTH (1000); ST-BME's default depth is 9999.
    await page.evaluate(baseUrl => {
        const c = SillyTavern.getContext();
        c.extensionSettings.st_bme.injectDepth = 4;
        c.extensionSettings.st_bme.authorityBaseUrl = baseUrl || '/api/plugins/authority'; // ST-BME's default
        c.saveSettingsDebounced();
    }, BASE_URL);
    await sleep(4000); // the debounced save
    bases.clear(); // count what the reloaded page does with these settings
    for (const key of Object.keys(calls)) delete calls[key];
    await openSt();
    await page.evaluate(() => SillyTavern.getContext().selectCharacterById('0'));
    await waitFor(() => page.evaluate(() => document.querySelectorAll('#chat .mes').length >= 1), 'the chat to open');
    await page.evaluate(() => SillyTavern.getContext().executeSlashCommands('/newchat'));
    await sleep(4000);
    const chatId = await page.evaluate(() => SillyTavern.getContext().getCurrentChatId());
    console.log(`chat: ${chatId}`);

    const send = async text => {
        const before = await page.evaluate(() => document.querySelectorAll('#chat .mes').length);
        await page.fill('#send_textarea', text);
        await page.click('#send_but');
        await waitFor(() => page.evaluate(n => document.querySelectorAll('#chat .mes').length >= n + 2 && !!document.querySelector('#send_but:not(.displayNone)'), before), `the reply to "${text}"`);
        await sleep(2000);
    };
    for (const line of ['Hello Seraphina, where did you hide the silver key?',
        'I buried the silver key under the old oak tree near the lighthouse.',
        'Let us go fishing at the harbour tomorrow, bring the red umbrella.']) {
        await send(line);
    }
    const nodes = async () => (await authority('/sql/query', { database: 'default', statement: 'SELECT COUNT(*) AS count FROM st_bme_graph_nodes WHERE chat_id = ?', params: [chatId] })).rows?.[0]?.count || 0;
    await waitFor(async () => (await nodes()) >= 3, 'three memories in the sidecar', 90000).catch(() => null);
    await send('Do you still remember where the silver key is buried?');
    await page.screenshot({ path: path.join(OUT, 'chat.png') });

    const expected = BASE_URL || '/api/plugins/authority';
    check(`ST-BME reached the sidecar at ${expected}`, bases.size === 1 && bases.has(expected), [...bases].join(', '));
    const rows = (await authority('/sql/query', { database: 'default', statement: 'SELECT payload_json AS payloadJson FROM st_bme_graph_nodes WHERE chat_id = ?', params: [chatId] })).rows || [];
    const payloads = rows.map(r => JSON.parse(r.payloadJson));
    check('ST-BME stores its graph in the sidecar (SQL)', payloads.length >= 3, `${payloads.length} nodes for chat ${JSON.stringify(chatId)}`);
    const marker = await page.evaluate(() => SillyTavern.getContext().chatMetadata?.st_bme_commit_marker?.storageTier);
    check('ST-BME reports the Authority SQL tier', marker === 'authority-sql', `st_bme_commit_marker.storageTier = ${marker}`);
    const stat = await authority('/trivium/stat', { database: 'st_bme_vectors', includeMappingIntegrity: true });
    check('its vectors are in the sidecar (Trivium)', stat.itemCount >= payloads.length && stat.mappingIntegrity?.ok,
        `${stat.itemCount} vectors of ${JSON.stringify(stat.dims)} dimensions, index integrity ${stat.mappingIntegrity?.ok}`);
    check('the browser kept no copy of the vectors', payloads.every(p => !p.embedding), 'node.embedding emptied after the sync');
    const recallCalls = ['trivium/search-hybrid 200', 'trivium/list-mappings 200'].map(k => calls[k] || 0);
    check('recall queried the sidecar', recallCalls.every(n => n > 0), `search-hybrid ${recallCalls[0]}, list-mappings ${recallCalls[1]}`);
    const failed = Object.entries(calls).filter(([k]) => !/ 200$/.test(k) && !/fs\/private\/(read-file|stat|delete) 404$/.test(k));
    check('no Authority call failed', failed.length === 0, failed.map(([k, n]) => `${k} x${n}`).join(', ') || `${Object.values(calls).reduce((a, b) => a + b, 0)} calls`);
    const prompts = modelLog().filter(e => e.kind === 'chat');
    const last = prompts.at(-1)?.prompt || '';
    const block = last.indexOf('[Memory');
    check('recalled memories reach the prompt', block >= 0 && /Key under the oak|silver key/.test(last.slice(block)),
        block >= 0 ? last.slice(block, block + 160).replace(/\n/g, ' | ') : 'no memory block in the last prompt');
    console.log('Authority calls seen: ' + JSON.stringify(calls));
} finally {
    await page.screenshot({ path: path.join(OUT, 'last.png') }).catch(() => null);
    await browser.close();
}
const failures = checks.filter(c => !c.ok).length;
console.log(failures ? `${failures} check(s) failed` : 'all checks passed');
process.exit(failures ? 1 : 0);
