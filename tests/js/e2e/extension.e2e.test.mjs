// End to end: the real extension (st_extension/index.js) in headless Chromium, inside the ST stand-in
// (host/st-host.js), against a real `stbme serve` with the bundled local embedding model.
// The steps share one chat and run in order.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import {
    EXTENSION_URL_PATH, REPO, SCREENSHOTS, freePort, launchBrowser, startSidecar, startStHost, waitFor,
} from './support.mjs';

const CHAT = 'Elena - 2024-10-18@20h00m00s';
const DEPTH = 3;

let sidecar, st, browser, page;
const consoleErrors = [];

/** Call the sidecar directly (from Node, not the page). */
async function api(method, urlPath, body) {
    const res = await fetch(`${sidecar.url}${urlPath}`, {
        method, headers: body ? { 'Content-Type': 'application/json' } : {}, body: body ? JSON.stringify(body) : undefined,
    });
    return { status: res.status, data: await res.json() };
}
const enc = encodeURIComponent;

async function memoryTexts(chatId = CHAT) {
    const { data } = await api('GET', `/v1/chats/${enc(chatId)}/nodes?limit=200`);
    return (data.nodes ?? []).map(n => `${n.label} ${JSON.stringify(n.fields)}`);
}

/** Wait until the sidecar processed the chat as it is in the page now. */
async function settled(chatId = CHAT) {
    const length = await page.evaluate(() => window.stHost.chat.length);
    await waitFor(async () => {
        const { data } = await api('GET', `/v1/chats/${enc(chatId)}/status`);
        return data.messages === length && data.processed_upto === length - 1 && !data.jobs?.pending;
    }, { timeoutMs: 60000, what: `the sidecar to process ${length} messages of ${chatId}` });
}

async function send(text) {
    return page.evaluate(t => window.stHost.Generate('normal', { text: t }), text);
}

function injectedOf(record) {
    const messages = record.prompt.messages;
    const idx = messages.findIndex(m => m.injected);
    if (idx === -1) return null;
    return { message: messages[idx], depth: messages.slice(idx + 1).filter(m => !m.injected).length };
}

before(async () => {
    fs.mkdirSync(SCREENSHOTS, { recursive: true });
    // The page's origin must be allowed by the sidecar's CORS: pick the page's port first.
    const hostPort = await freePort();
    const origin = `http://127.0.0.1:${hostPort}`;
    sidecar = await startSidecar({ origins: [origin] });
    st = await startStHost({ sidecarUrl: sidecar.url, port: hostPort });
    assert.equal(st.origin, origin);
    browser = await launchBrowser();
    // Page-side waits (waitForFunction, waitForSelector, clicks) share one generous deadline.
    browser.context.setDefaultTimeout(60000);
    page = await browser.context.newPage();
    page.on('console', m => { if (m.type() === 'error') consoleErrors.push(m.text()); });
    page.on('pageerror', e => consoleErrors.push(`pageerror: ${e.message}`));
    await page.goto(`${st.origin}/`);
    await page.waitForFunction(() => window.stHostBoot);
    await page.evaluate(url => window.stHostBoot({
        settings: { stbme: { sidecarUrl: url, connection: 'direct', syncDebounceMs: 300, recallTimeoutMs: 8000 } },
    }), sidecar.url);
});

after(async () => {
    await browser?.close();
    await st?.close();
    await sidecar?.stop();
    if (sidecar?.dataDir) fs.rmSync(sidecar.dataDir, { recursive: true, force: true });
});

test('the extension loads like a third-party extension and connects', async () => {
    const active = await page.evaluate(() => [...window.stHost.activeExtensions]);
    assert.deepEqual(active, ['third-party/st-bme-sidecar']);
    assert.equal(await page.evaluate(() => typeof window.stbme_generateInterceptor), 'function');
    await page.waitForSelector('#extensions_settings2 #stbme_settings');
    await page.waitForFunction(() => document.querySelector('#stbme_status_dot')?.classList.contains('stbme_dot_ok'));
    await page.waitForFunction(() => window.stbme.debug.live?.route === 'websocket' && window.stbme.debug.live.state === 'open');
    const commands = await page.evaluate(() => Object.keys(window.stHost.SlashCommandParser.commands).sort());
    for (const name of ['memory-status', 'remember', 'recall', 'stbme-status', 'stbme-recall']) assert.ok(commands.includes(name), name);
    const manifest = JSON.parse(fs.readFileSync(path.join(REPO, 'st_extension', 'manifest.json'), 'utf8'));
    assert.deepEqual(manifest.requires, []);
});

test('the settings panel renders the sidecar schema: a short basic view, the rest under Advanced; screenshot', async () => {
    await page.click('#stbme_settings > .inline-drawer > .inline-drawer-toggle');
    await page.waitForSelector('.stbme_field[data-setting="recall.budget_tokens"]', { state: 'visible' });
    const schema = (await api('GET', '/v1/settings/schema')).data.settings;
    for (const def of schema) {
        assert.ok(await page.$(`.stbme_field[data-setting="${def.name}"]`), `control for ${def.name}`);
    }
    // Basic: a few settings, visible at once; everything else is in Advanced, closed, its groups closed too.
    const basic = await page.$$eval('#stbme_sidecar_settings .stbme_basic > .stbme_field', els => els.map(e => e.dataset.setting));
    assert.ok(basic.length >= 6 && basic.length <= 12, `basic view: ${basic.join(', ')}`);
    for (const name of ['recall.budget_tokens', 'inject.position', 'inject.depth', 'llm.mode']) assert.ok(basic.includes(name), name);
    for (const name of basic) assert.ok(await page.isVisible(`.stbme_field[data-setting="${name}"]`), `${name} is visible`);
    assert.equal(await page.$eval('details.stbme_advanced', d => d.open), false, 'Advanced starts closed');
    assert.equal(await page.isVisible('.stbme_field[data-setting="recall.directive_share"]'), false);
    assert.equal(await page.$$eval('#stbme_sidecar_settings .stbme_field', els => els.length), schema.length, 'every setting once');
    await page.click('details.stbme_advanced > summary');
    const groups = await page.$$eval('details.stbme_advanced details.stbme_group', ds => ds.map(d => ({ group: d.dataset.group, open: d.open })));
    assert.ok(groups.length >= 5, JSON.stringify(groups));
    assert.ok(groups.every(g => !g.open), 'groups under Advanced start closed');
    await page.click('details.stbme_group[data-group="recall"] > summary');
    await page.waitForSelector('.stbme_field[data-setting="recall.directive_share"]', { state: 'visible' });

    // Selects show words; the stored value stays the raw one.
    const position = await page.$eval('.stbme_field[data-setting="inject.position"] select', el => ({
        value: el.value, shown: el.selectedOptions[0].textContent, options: [...el.options].map(o => o.textContent),
    }));
    assert.equal(position.value, 'in_chat');
    assert.equal(position.shown, 'In the chat, at a depth');
    for (const text of position.options) assert.doesNotMatch(text, /_/);
    assert.equal(await page.$eval('.stbme_field[data-setting="inject.role"] select', el => el.selectedOptions[0].textContent), 'System');
    assert.match(await page.$eval('label[for="stbme_import_mode"]', el => el.textContent), /Import mode/);

    const panel = await page.$('#stbme_settings');
    await panel.screenshot({ path: path.join(SCREENSHOTS, 'settings-panel.png') });
    await page.click('details.stbme_group[data-group="recall"] > summary');
    await page.click('details.stbme_advanced > summary');
    assert.equal(await page.$eval('details.stbme_advanced', d => d.open), false);
});

test('no placeholder in the panel is cut off, on a phone-wide panel too', async () => {
    // Open every part of the panel that has inputs, then measure each placeholder in the input's own font.
    await page.$$eval('#stbme_settings details', ds => { for (const d of ds) d.open = true; });
    await page.$eval('#stbme_browser', el => { el.hidden = false; });
    for (const width of ['480px', '360px']) {
        await page.$eval('#top', (el, w) => { el.style.width = w; }, width);
        const cut = await page.$$eval('#stbme_settings input[placeholder], #stbme_settings textarea[placeholder]', els => {
            const canvas = document.createElement('canvas').getContext('2d');
            return els.filter(el => el.placeholder && el.offsetParent !== null).flatMap(el => {
                const style = getComputedStyle(el);
                canvas.font = `${style.fontStyle} ${style.fontWeight} ${style.fontSize} ${style.fontFamily}`;
                const room = el.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
                const need = canvas.measureText(el.placeholder).width;
                return need > room ? [`${el.id || el.dataset.stbmeServerSetting}: "${el.placeholder}" needs ${Math.ceil(need)}px, has ${Math.floor(room)}px`] : [];
            });
        });
        assert.deepEqual(cut, [], `at ${width}`);
    }
    await page.$eval('#top', el => { el.style.width = ''; });
    await page.$eval('#stbme_browser', el => { el.hidden = true; });
    await page.$$eval('#stbme_settings details', ds => { for (const d of ds) d.open = false; });
});

test('a setting change is validated by the sidecar and errors show next to the field', async () => {
    const sel = '.stbme_field[data-setting="recall.budget_tokens"]';
    await page.fill(`${sel} input`, '1');
    await page.$eval(`${sel} input`, el => el.dispatchEvent(new Event('change')));
    await page.waitForFunction(s => document.querySelector(`${s} .stbme_field_error`).textContent.includes('minimum'), sel);
    assert.equal((await api('GET', '/v1/settings')).data.settings['recall.budget_tokens'], 800, 'nothing changed');
    await page.fill(`${sel} input`, '600');
    await page.$eval(`${sel} input`, el => el.dispatchEvent(new Event('change')));
    await waitFor(async () => (await api('GET', '/v1/settings')).data.settings['recall.budget_tokens'] === 600, { what: 'budget 600' });
    await page.waitForFunction(s => !document.querySelector(s).classList.contains('stbme_saving'), sel);
    assert.equal(await page.$eval(`${sel} .stbme_field_error`, el => el.textContent), '');
    // the injection depth used by the rest of the test
    const depthSel = '.stbme_field[data-setting="inject.depth"]';
    await page.fill(`${depthSel} input`, String(DEPTH));
    await page.$eval(`${depthSel} input`, el => el.dispatchEvent(new Event('change')));
    await waitFor(async () => (await api('GET', '/v1/settings')).data.settings['inject.depth'] === DEPTH, { what: 'depth' });
});

test('chat a few turns, plant a fact: the prompt of a later turn carries the memory at the configured depth', async () => {
    await page.evaluate(() => window.stHost.selectCharacter(0));
    assert.equal(await page.evaluate(() => window.SillyTavern.getContext().getCurrentChatId()), CHAT);
    await send('Good evening, Elena. Quiet night at the inn?');
    await send('The vault code is 4417. Keep it secret.');
    await send('Tell me about the harbour.');
    await send('And the weather tomorrow?');
    await settled();
    const texts = await memoryTexts();
    assert.ok(texts.some(t => t.includes('4417')), 'the planted fact is a memory');

    const record = await send('What was the vault code again?');
    assert.ok(record.reply, 'the generation completed');
    const injected = injectedOf(record);
    assert.ok(injected, 'a memory block was injected');
    assert.match(injected.message.content, /4417/);
    assert.equal(injected.depth, DEPTH, 'the block sits at the configured depth');
    assert.equal(injected.message.role, 'system');
    const slot = await page.evaluate(() => window.stHost.extension_prompts.stbme_memory);
    assert.equal(slot.position, 1, 'IN_CHAT');
    assert.equal(slot.depth, DEPTH);
    assert.equal(slot.role, 0);
    assert.equal(slot.scan, false);

    // ST awaits every listener: ours must never hold the pipeline on the network.
    const slow = await page.evaluate(() => window.stHost.listenerTimes.filter(t => t.ms > 100));
    assert.deepEqual(slow, []);
});

test('"memories used" shows what was injected', async () => {
    await page.click('#stbme_show_used');
    const summary = await page.textContent('#stbme_injection_summary');
    assert.match(summary, /memories/);
    assert.match(await page.textContent('#stbme_injection_text'), /4417/);
    assert.ok((await page.$$('#stbme_injection_list li')).length >= 1);
    // the README's screenshot: the panel with the last injection open
    await (await page.$('#stbme_settings')).screenshot({ path: path.join(SCREENSHOTS, 'memories-used.png') });
    if (process.env.STBME_DOCS_SCREENSHOT) {
        fs.mkdirSync(path.join(REPO, 'docs', 'img'), { recursive: true });
        await (await page.$('#stbme_settings')).screenshot({ path: path.join(REPO, 'docs', 'img', 'settings-panel.png') });
    }
    await page.click('#stbme_show_used');

    // /memory-used opens ST's popup, which centres its text (popup.css); the block reads left-aligned.
    const used = await page.evaluate(() => window.stHost.executeSlashCommand('/memory-used'));
    assert.match(used, /4417/);
    const block = 'dialog.popup[open] .popup-content .stbme_popup .stbme_block';
    await page.waitForSelector(block, { state: 'visible' });
    assert.match(await page.textContent(block), /4417/);
    assert.equal(await page.$eval('dialog.popup[open]', el => getComputedStyle(el).textAlign), 'center', "ST's popup style is in force");
    assert.equal(await page.$eval(block, el => getComputedStyle(el).textAlign), 'left');
    await (await page.$('dialog.popup[open]')).screenshot({ path: path.join(SCREENSHOTS, 'memories-used-popup.png') });
    await page.evaluate(() => window.stHost.closePopup());
    await page.waitForSelector('dialog.popup', { state: 'detached' });
});

test('slash commands: /remember (named arguments before or after the text), /recall, /memory-status', async () => {
    const id = await page.evaluate(() => window.stHost.executeSlashCommand('/remember pin=true Elena is afraid of deep water.'));
    assert.match(id, /\S/);
    const { data } = await api('GET', `/v1/chats/${enc(CHAT)}/nodes/${enc(id)}`);
    assert.equal(data.node.pinned, true);
    // ST's parser leaves a named argument after the text inside the text (SlashCommandParser.js parseCommand)
    const after = await page.evaluate(() => window.stHost.executeSlashCommand('/remember Mira fears water pin=true'));
    const mira = (await api('GET', `/v1/chats/${enc(CHAT)}/nodes/${enc(after)}`)).data.node;
    assert.equal(mira.pinned, true);
    assert.doesNotMatch(JSON.stringify(mira.fields), /pin=/);
    assert.equal(mira.label, 'Mira fears water');
    const recalled = await page.evaluate(() => window.stHost.executeSlashCommand('/recall vault code'));
    assert.match(recalled, /4417/);
    const status = await page.evaluate(() => window.stHost.executeSlashCommand('/memory-status'));
    assert.match(status, /connected/);
    assert.match(status, /Messages synced: \d+/);
});

test('editing the message changes the memory', async () => {
    const index = await page.evaluate(() => window.stHost.chat.findIndex(m => m.mes.includes('4417')));
    await page.evaluate(i => window.stHost.editMessage(i, 'The vault code is 9921. Keep it secret.'), index);
    await settled();
    await waitFor(async () => {
        const texts = await memoryTexts();
        return texts.some(t => t.includes('9921')) && !texts.some(t => t.includes('4417'));
    }, { what: 'the edited fact to replace the old one' });
    const record = await send('Remind me of the vault code, please.');
    const injected = injectedOf(record);
    assert.ok(injected);
    assert.match(injected.message.content, /9921/);
    assert.doesNotMatch(injected.message.content, /4417/);
});

test('deleting the message removes its memory', async () => {
    const index = await page.evaluate(() => window.stHost.chat.findIndex(m => m.mes.includes('9921')));
    await page.evaluate(i => window.stHost.deleteMessage(i), index);
    await settled();
    await waitFor(async () => !(await memoryTexts()).some(t => t.includes('9921')), { what: 'the deleted fact to disappear' });
});

test('swiping follows the visible reply', async () => {
    await page.evaluate(() => window.stHost.backendReplies.push('The lighthouse key is hidden under the blue stone.'));
    await send('Where is the lighthouse key?');
    await settled();
    await waitFor(async () => (await memoryTexts()).some(t => t.includes('blue stone')), { what: 'the first swipe to be remembered' });

    await page.evaluate(() => window.stHost.backendReplies.push('The lighthouse has no key at all; the door is never locked.'));
    await page.evaluate(() => window.stHost.swipeRight());
    await settled();
    await waitFor(async () => {
        const texts = await memoryTexts();
        return texts.some(t => t.includes('never locked')) && !texts.some(t => t.includes('blue stone'));
    }, { what: 'the new swipe to replace the old one' });

    await page.evaluate(() => window.stHost.swipeLeft());
    await settled();
    await waitFor(async () => {
        const texts = await memoryTexts();
        return texts.some(t => t.includes('blue stone')) && !texts.some(t => t.includes('never locked'));
    }, { what: 'swiping back to restore the first reply' });
});

test('the memory browser lists, searches, pins, edits and archives', async () => {
    await page.click('#stbme_show_browser');
    await page.fill('#stbme_browser_q', 'lighthouse');
    await page.click('#stbme_browser_search');
    await page.waitForFunction(() => [...document.querySelectorAll('#stbme_browser_list .stbme_node')].some(n => n.textContent.includes('blue stone')));
    const row = '#stbme_browser_list .stbme_node:has-text("blue stone")';
    const id = await page.getAttribute(row, 'data-id');
    // Each row says its text once, and a one-message memory reads "msg N".
    const rows = await page.$$eval('#stbme_browser_list .stbme_node', els => els.map(el => ({
        text: el.querySelector('.stbme_node_text').textContent,
        all: el.textContent,
        meta: el.querySelector('.stbme_meta').textContent,
    })));
    for (const r of rows) assert.equal(r.all.split(r.text).length - 1, 1, `said once: ${r.all}`);
    const node = (await api('GET', `/v1/chats/${enc(CHAT)}/nodes/${enc(id)}`)).data.node;
    const [from, to] = node.seq_range;
    assert.equal(from, to, 'the planted fact comes from one message');
    const meta = await page.textContent(`${row} .stbme_meta`);
    assert.match(meta, new RegExp(`\\bmsg ${from}\\b`));
    assert.doesNotMatch(meta, /msgs/);
    await (await page.$('#stbme_browser')).screenshot({ path: path.join(SCREENSHOTS, 'memory-browser.png') });
    await page.click(`${row} button[data-action="pin"]`);
    await waitFor(async () => (await api('GET', `/v1/chats/${enc(CHAT)}/nodes/${enc(id)}`)).data.node.pinned, { what: 'pinned' });

    await page.click(`#stbme_browser_list .stbme_node[data-id="${id}"] button[data-action="edit"]`);
    const labels = await page.$$eval(`#stbme_browser_list .stbme_node[data-id="${id}"] .stbme_editor label`, els => els.map(e => e.textContent));
    assert.ok(labels.includes('Summary'), labels.join(', '));
    for (const label of labels) assert.match(label, /^[A-Z]/, 'words, not raw field names');
    await page.fill(`#stbme_browser_list .stbme_node[data-id="${id}"] textarea[data-field="summary"]`, 'The lighthouse key is hidden under the blue stone by the well.');
    await page.click(`#stbme_browser_list .stbme_node[data-id="${id}"] button[data-action="save"]`);
    await waitFor(async () => (await api('GET', `/v1/chats/${enc(CHAT)}/nodes/${enc(id)}`)).data.node.fields.summary.includes('by the well'), { what: 'edited' });

    await page.waitForSelector(`#stbme_browser_list .stbme_node[data-id="${id}"] button[data-action="lock"]`);
    await page.click(`#stbme_browser_list .stbme_node[data-id="${id}"] button[data-action="lock"]`);
    await waitFor(async () => (await api('GET', `/v1/chats/${enc(CHAT)}/nodes/${enc(id)}`)).data.node.locked, { what: 'locked' });
    await page.waitForSelector(`#stbme_browser_list .stbme_node[data-id="${id}"] button[data-action="archive"]`);
    await page.click(`#stbme_browser_list .stbme_node[data-id="${id}"] button[data-action="archive"]`);
    await waitFor(async () => (await api('GET', `/v1/chats/${enc(CHAT)}/nodes/${enc(id)}`)).data.node.archived, { what: 'archived' });
    await page.check('#stbme_browser_archived');
    await page.click('#stbme_browser_search');
    await page.waitForSelector(`#stbme_browser_list .stbme_node[data-id="${id}"] button[data-action="restore"]`);
    await page.click(`#stbme_browser_list .stbme_node[data-id="${id}"] button[data-action="restore"]`);
    await waitFor(async () => !(await api('GET', `/v1/chats/${enc(CHAT)}/nodes/${enc(id)}`)).data.node.archived, { what: 'restored' });
    await page.uncheck('#stbme_browser_archived');
    await page.click('#stbme_show_browser');
});

test('export downloads the memories; import accepts an original ST-BME graph', async () => {
    const [download] = await Promise.all([page.waitForEvent('download'), page.click('#stbme_export')]);
    const exported = JSON.parse(fs.readFileSync(await download.path(), 'utf8'));
    assert.equal(exported.format, 'stbme-sidecar');
    assert.ok(exported.nodes.length > 3);

    const before = (await api('GET', `/v1/chats/${enc(CHAT)}/nodes?limit=1`)).data.total;
    await page.setInputFiles('#stbme_import_file', path.join(path.dirname(new URL(import.meta.url).pathname), 'fixtures', 'st_bme_graph.json'));
    await waitFor(async () => (await api('GET', `/v1/chats/${enc(CHAT)}/nodes?limit=1`)).data.total >= before + 3, { what: 'imported nodes' });
    assert.ok((await memoryTexts()).some(t => t.includes('astrolabe')));

    const n = await page.evaluate(() => window.toastr.toasts.length);
    await page.click('#stbme_reindex');
    await page.waitForFunction(k => window.toastr.toasts.slice(k).some(t => /Rebuilding the index/.test(t.message)), n);
    const errors = await page.evaluate(k => window.toastr.toasts.slice(k).filter(t => t.level === 'error'), n);
    assert.deepEqual(errors, []);
});

test('per-chat settings: before_prompt for this chat only', async () => {
    await page.check('input[name="stbme_scope"][value="chat"]');
    const sel = '.stbme_field[data-setting="inject.position"]';
    await page.selectOption(`${sel} select`, 'before_prompt');
    await waitFor(async () => (await api('GET', `/v1/chats/${enc(CHAT)}/settings`)).data.overrides?.['inject.position'] === 'before_prompt', { what: 'override' });
    assert.equal((await api('GET', '/v1/settings')).data.settings['inject.position'], 'in_chat', 'global unchanged');
    const record = await send('Anything about the astrolabe?');
    assert.equal(injectedOf(record), null, 'not in the chat');
    assert.match(record.prompt.beforeScenarioAnchor, /astrolabe/);
    // remove the override with the reset button
    await page.click(`${sel} .stbme_reset`);
    await waitFor(async () => !(await api('GET', `/v1/chats/${enc(CHAT)}/settings`)).data.overrides?.['inject.position'], { what: 'override removed' });
    await page.check('input[name="stbme_scope"][value="global"]');
});

test('quiet generations and dry runs are ignored', async () => {
    const before = await page.evaluate(() => window.stbme.debug.lastInjection?.at);
    await page.evaluate(() => window.stHost.Generate('quiet'));
    await page.evaluate(() => window.stHost.Generate('normal', {}, true));
    assert.equal(await page.evaluate(() => window.stbme.debug.lastInjection?.at), before);
});

/** Put the sidecar in llm.mode = relay with ST's backend held, run `during(rawRequest)`, then release and go back. */
async function withHeldRelay(message, during) {
    const n = await page.evaluate(() => window.stHost.backendRequests.length);
    await page.evaluate(() => { window.stHost.holdRaw = true; });
    await api('PUT', '/v1/settings', { settings: { 'llm.mode': 'relay' } });
    try {
        await send(message); // its reply is extracted through the relay, on ST's connection
        const raw = await waitFor(() => page.evaluate(k => window.stHost.backendRequests.slice(k).find(r => r.kind === 'raw' && !r.answered), n),
            { timeoutMs: 60000, what: 'a relayed request in flight at ST\'s backend' });
        await during(raw);
    } finally {
        await page.evaluate(() => { window.stHost.holdRaw = false; window.stHost.releaseBackend(); });
        await settled();
        await api('PUT', '/v1/settings', { settings: { 'llm.mode': 'none' } });
    }
}

test("Chat Completion: a chat generation during a slow relayed request keeps the user's max_tokens", async () => {
    const userMax = await page.evaluate(() => window.stHost.oai_settings.openai_max_tokens);
    const relayMax = (await api('GET', '/v1/settings')).data.settings['llm.max_tokens'];
    assert.notEqual(userMax, relayMax);
    await withHeldRelay('Marek borrowed the red lantern from the lighthouse.', async raw => {
        assert.equal(raw.data.max_tokens, relayMax, 'the relayed request asks for the length the sidecar wants');
        assert.equal(await page.evaluate(() => window.stHost.oai_settings.openai_max_tokens), userMax, "ST's setting is untouched");
        const record = await send('What did Marek borrow?');
        assert.ok(record.reply);
        assert.equal(record.request.max_tokens, userMax, 'the chat reply goes out with the user\'s max_tokens');
        assert.equal(record.maxContext, 4095 - userMax, 'and the prompt budget is the user\'s');
    });
});

test("Text completion: a chat generation that starts during a relayed request waits for it, then keeps the user's length", async () => {
    await page.evaluate(() => window.stHost.setMainApi('textgenerationwebui', { responseLength: 250 }));
    try {
        await withHeldRelay('Elena hid the silver key in the chapel.', async raw => {
            // ST 1.12.6 can only pass a length to a text-completion generateRaw through its global amount_gen.
            assert.equal(raw.data.max_new_tokens, 1200);
            const before = await page.evaluate(() => window.stHost.emitted.length);
            const pending = send('Where is the silver key?');
            await page.waitForFunction(k => window.stHost.emitted.slice(k).some(e => e.event === 'generation_started'), before);
            await page.evaluate(() => { window.stHost.holdRaw = false; window.stHost.releaseBackend(); });
            const record = await pending;
            assert.ok(record.reply);
            assert.equal(record.request.max_new_tokens, 250, 'the chat reply goes out with the user\'s length');
            assert.equal(record.maxContext, 2048 - 250, 'and the prompt budget is the user\'s');
        });
        assert.equal(await page.evaluate(() => window.stHost.amountGen), 250, "the user's setting is restored");
    } finally {
        await page.evaluate(() => window.stHost.setMainApi('openai'));
    }
});

test("'Remember this chat's history now' processes an old chat and shows its progress", async () => {
    const OLD = 'Elena - old history';
    const history = Array.from({ length: 30 }, (_, i) => ({
        name: i % 2 ? 'Elena' : 'You', is_user: i % 2 === 0, is_system: false, send_date: 'June 1, 2024 9:05am',
        mes: i % 2 ? `Day ${i}: the caravan reached well number ${i}, and Elena marked it on the map.` : `What happened on day ${i}?`,
        swipe_id: 0, extra: {},
    }));
    // An old chat whose history the sidecar stores but has not turned into memories yet.
    await api('PUT', `/v1/chats/${enc(OLD)}/settings`, { settings: { 'extract.enabled': false } });
    await page.evaluate(([id, messages]) => { window.stHost.chatFiles[id] = messages; }, [OLD, history]);
    await page.evaluate(id => window.stHost.openCharacterChat(id), OLD);
    await waitFor(async () => (await api('GET', `/v1/chats/${enc(OLD)}/status`)).data.messages === 30, { what: 'the old chat synced' });
    await api('PUT', `/v1/chats/${enc(OLD)}/settings`, { settings: { 'extract.enabled': null } });
    assert.equal((await api('GET', `/v1/chats/${enc(OLD)}/status`)).data.processed_upto, -1);

    assert.equal(await page.isVisible('#stbme_history'), false);
    await page.click('#stbme_history_button');
    await page.waitForSelector('#stbme_history', { state: 'visible' });
    await page.waitForFunction(() => document.querySelector('#stbme_history_text')?.textContent.startsWith('Remembered: 30/30 messages (100%)'));
    assert.equal(await page.$eval('#stbme_history_bar', bar => bar.value), 1);
    const status = (await api('GET', `/v1/chats/${enc(OLD)}/status`)).data;
    assert.equal(status.processed_upto, 29);
    assert.ok(status.nodes >= 15 && status.unembedded === 0);
    await page.evaluate(chatId => window.stHost.openCharacterChat(chatId), CHAT);
    assert.equal(await page.isVisible('#stbme_history'), false, 'the bar belongs to the chat it followed');
});

test('a chat change clears the slot; group chats sync; deleted chats offer to delete their memories', async () => {
    await page.evaluate(() => window.stHost.openCharacterChat('Elena - second chat'));
    const slot = await page.evaluate(() => window.stHost.extension_prompts.stbme_memory?.value);
    assert.equal(slot, '');
    await send('A new story begins.');
    await settled('Elena - second chat');

    await page.evaluate(() => window.stHost.openGroupChat('g1'));
    await send('Hello, everyone.');
    await settled('Party - group chat 1');
    await page.evaluate(() => window.stHost.deleteGroupChat('Party - group chat 1'));
    await waitFor(async () => (await api('GET', `/v1/chats/${enc('Party - group chat 1')}/status`)).status === 404, { what: 'group chat memories deleted' });

    await page.evaluate(() => { window.stHost.popupAnswer = 0; });
    await page.evaluate(() => window.stHost.deleteCharacterChat('Elena - second chat'));
    // The extension got past the question and kept the memories (a positive sign, not a pause).
    await page.waitForFunction(() => window.stbme.debug.lastDeleteOffer?.chatId === 'Elena - second chat' && window.stbme.debug.lastDeleteOffer.outcome === 'kept');
    assert.equal((await api('GET', `/v1/chats/${enc('Elena - second chat')}/status`)).status, 200, 'kept when the user says no');
    await page.evaluate(() => { window.stHost.popupAnswer = 1; });
    await page.evaluate(() => window.stHost.deleteCharacterChat('Elena - second chat'));
    await waitFor(async () => (await api('GET', `/v1/chats/${enc('Elena - second chat')}/status`)).status === 404, { what: 'chat memories deleted' });
    const popups = await page.evaluate(() => window.stHost.popups.map(p => p.text));
    assert.ok(popups.some(t => t.includes('Elena - second chat')));

    await page.evaluate(() => window.stHost.selectCharacter(0));
    await page.evaluate(chatId => window.stHost.openCharacterChat(chatId), CHAT);
    assert.equal(await page.evaluate(() => window.stHost.getCurrentChatId()), CHAT);
});

test('through the ST server plugin when the user picks it', async () => {
    await page.$eval('.stbme_settings details.stbme_group', d => { d.open = true; });
    await page.selectOption('#stbme_connection', 'proxy');
    await page.waitForFunction(() => window.stbme.debug.connection === 'proxy');
    const before = st.proxied.length;
    const record = await send('Where is the lighthouse key?');
    const injected = injectedOf(record);
    assert.ok(injected);
    assert.match(injected.message.content, /blue stone/);
    assert.ok(st.proxied.slice(before).some(r => r.includes('/recall')), 'recall went through /api/plugins/stbme');
    // No WebSocket through ST's plugin router: the live channel (notices, progress, LLM relay) long-polls.
    await page.waitForFunction(() => window.stbme.debug.live?.route === 'long-poll' && window.stbme.debug.live.state === 'open');
    assert.ok(st.proxied.some(r => r.includes('/v1/live/poll')), 'the live channel long-polls through the plugin');
    await page.screenshot({ path: path.join(SCREENSHOTS, 'proxy.png'), fullPage: true });

    // automatic: the direct URL is dead (a phone cannot reach the PC's 127.0.0.1), the plugin is used
    await page.selectOption('#stbme_connection', 'auto');
    await page.fill('#stbme_url', 'http://127.0.0.1:1');
    await page.$eval('#stbme_url', el => el.dispatchEvent(new Event('change')));
    await page.waitForFunction(() => window.stbme.debug.connection === 'proxy');
    const viaAuto = await send('And the blue stone?');
    assert.ok(injectedOf(viaAuto), 'memory through the automatic fallback');

    await page.selectOption('#stbme_connection', 'direct');
    await page.fill('#stbme_url', sidecar.url);
    await page.$eval('#stbme_url', el => el.dispatchEvent(new Event('change')));
    await page.waitForFunction(() => window.stbme.debug.connection === 'ok');
});

test('installs from the repository layout (manifest at the root, code in st_extension/)', async () => {
    const other = await browser.context.newPage();
    try {
        await other.goto(`${st.origin}/`);
        await other.waitForFunction(() => window.stHostBoot);
        await other.evaluate(url => window.stHostBoot({
            extensions: ['third-party/st-bme-sidecar-repo'], settings: { stbme: { sidecarUrl: url, connection: 'direct' } },
        }), sidecar.url);
        await other.waitForSelector('#extensions_settings2 #stbme_settings', { state: 'attached' });
        await other.waitForFunction(() => window.stbme.debug.connection === 'ok');
        assert.equal(await other.evaluate(() => typeof window.stbme_generateInterceptor), 'function');
        await other.evaluate(() => window.stHost.selectCharacter(1));
        const record = await other.evaluate(() => window.stHost.Generate('normal', { text: 'Hello Marek.' }));
        assert.ok(record.reply);
    } finally {
        await other.close();
    }
});

test('a dead sidecar never blocks generation, and the user is told once', async () => {
    const listenersBefore = await page.evaluate(() => window.stHost.listenerTimes.length);
    // Counted before the stop: the health loop or the closing live channel may notice the outage at once.
    const toastsBefore = await page.evaluate(() => window.toastr.toasts.length);
    await sidecar.stop();
    const first = await send('Are you still there?');
    const second = await send('Hello?');
    for (const record of [first, second]) {
        assert.ok(record.reply, 'the generation completed');
        assert.equal(injectedOf(record), null, 'no memory block');
        assert.ok(record.interceptorMs < 8000 + 1500 + 2000, `interceptor took ${record.interceptorMs} ms`);
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
});

test('no uncaught errors in the page', () => {
    const real = consoleErrors.filter(e => !/Failed to load resource|ERR_CONNECTION_REFUSED|WebSocket connection/.test(e));
    assert.deepEqual(real, []);
    assert.ok(EXTENSION_URL_PATH);
});
