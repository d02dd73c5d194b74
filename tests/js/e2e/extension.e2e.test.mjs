// End to end: the real extension (st_extension/index.js) in headless Chromium, inside the ST stand-in
// (host/st-host.js), against a real `stbme serve` with the bundled local embedding model.
// Each test opens its own chat and sets what it relies on (stack.mjs); none reads another's leftovers.
import { test, before, after, afterEach } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { REPO, SCREENSHOTS, waitFor } from './support.mjs';
import { LOADED_MS, chatHistory, enc, smallTalk, startStack, withCleanup } from './stack.mjs';

const FIXTURES = path.join(path.dirname(new URL(import.meta.url).pathname), 'fixtures');
/** The stand-in's first character's default chat (st-host.js `characters`). */
const DEFAULT_CHAT = 'Elena - 2024-10-18@20h00m00s';
const VAULT = 'The vault code is 4417. Keep it secret.';
const BLUE_STONE = 'The lighthouse key is hidden under the blue stone.';

/** @type {Awaited<ReturnType<typeof startStack>>} */
let stack;
let page, api, send, openChat, settled, memoryTexts;

function injectedOf(record) {
    const messages = record.prompt.messages;
    const idx = messages.findIndex(m => m.injected);
    if (idx === -1) return null;
    return { message: messages[idx], depth: messages.slice(idx + 1).filter(m => !m.injected).length };
}

/** A chat whose first user turn holds `fact`, then small talk, so the fact is beyond the last 4 messages. */
const factChat = (fact, reply = 'Elena nods slowly.') => chatHistory([[fact, reply], ...smallTalk(3)]);

const node = async (chatId, id) => (await api('GET', `/v1/chats/${enc(chatId)}/nodes/${enc(id)}`)).data.node;

before(async () => {
    stack = await startStack();
    ({ page, api, send, openChat, settled, memoryTexts } = stack);
});

after(async () => {
    await stack?.close();
});

afterEach(() => {
    assert.deepEqual(stack.newErrors(), [], 'no uncaught errors in the page');
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

test('chat a few turns, plant a fact: the prompt of a later turn carries the memory at the configured depth', async () => {
    const CHAT = 'Elena - planted fact';
    const DEPTH = 3;
    await openChat(CHAT, undefined, { overrides: { 'inject.depth': DEPTH, 'inject.position': 'in_chat', 'inject.role': 'system' } });
    await send('Good evening, Elena. Quiet night at the inn?');
    await send(VAULT);
    await send('Tell me about the harbour.');
    await send('And the weather tomorrow?');
    await settled(CHAT);
    assert.ok((await memoryTexts(CHAT)).some(t => t.includes('4417')), 'the planted fact is a memory');

    const record = await send('What was the vault code again?');
    assert.ok(record.reply, 'the generation completed');
    const injected = injectedOf(record);
    assert.ok(injected, `a memory block was injected: ${JSON.stringify(await page.evaluate(() => window.stbme.debug.lastInjection))}`);
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
    await openChat('Elena - memories used', factChat(VAULT));
    const record = await send('What was the vault code again?');
    assert.match(injectedOf(record)?.message.content ?? '', /4417/);
    await stack.showSection('stbme_show_used', 'stbme_injection_view', true);
    await withCleanup(async () => {
        assert.match(await page.textContent('#stbme_injection_summary'), /\d+ memor(y|ies)/);
        assert.match(await page.textContent('#stbme_injection_text'), /4417/);
        // Each memory says why it was chosen, in words; the score is only in its tooltip.
        const items = await page.$$eval('#stbme_injection_list li', els => els.map(el => ({ text: el.textContent, reasons: el.querySelector('.stbme_reasons')?.textContent ?? '' })));
        assert.ok(items.length >= 1);
        for (const item of items) {
            assert.doesNotMatch(item.text, /\d\.\d\d/, item.text);
            assert.match(item.reasons, /shares words|similar in meaning|pinned|always included|the day|latest|linked|next to/);
        }
        assert.ok(items.some(i => /4417/.test(i.text) && /shares words with your message/.test(i.reasons)), JSON.stringify(items));
        await (await page.$('#stbme_settings')).screenshot({ path: path.join(SCREENSHOTS, 'memories-used.png') });
    }, () => stack.showSection('stbme_show_used', 'stbme_injection_view', false));

    // /memory-used opens ST's popup, which centres its text (popup.css); the block reads left-aligned.
    await withCleanup(async () => {
        const used = await page.evaluate(() => window.stHost.executeSlashCommand('/memory-used'));
        assert.match(used, /4417/);
        const block = 'dialog.popup[open] .popup-content .stbme_popup .stbme_block';
        await page.waitForSelector(block, { state: 'visible' });
        assert.match(await page.textContent(block), /4417/);
        assert.equal(await page.$eval('dialog.popup[open]', el => getComputedStyle(el).textAlign), 'center', "ST's popup style is in force");
        assert.equal(await page.$eval(block, el => getComputedStyle(el).textAlign), 'left');
        await (await page.$('dialog.popup[open]')).screenshot({ path: path.join(SCREENSHOTS, 'memories-used-popup.png') });
    }, async () => {
        await page.evaluate(() => window.stHost.closePopup());
        await page.waitForSelector('dialog.popup', { state: 'detached' });
    });
});

test('slash commands: /remember (named arguments before or after the text), /recall, /memory-status', async () => {
    const CHAT = 'Elena - slash commands';
    await openChat(CHAT, factChat(VAULT));
    const id = await page.evaluate(() => window.stHost.executeSlashCommand('/remember pin=true Elena is afraid of deep water.'));
    assert.match(id, /\S/);
    assert.equal((await node(CHAT, id)).pinned, true);
    // ST's parser leaves a named argument after the text inside the text (SlashCommandParser.js parseCommand)
    const after = await page.evaluate(() => window.stHost.executeSlashCommand('/remember Mira fears water pin=true'));
    const mira = await node(CHAT, after);
    assert.equal(mira.pinned, true);
    assert.doesNotMatch(JSON.stringify(mira.fields), /pin=/);
    assert.equal(mira.label, 'Mira fears water');
    const recalled = await page.evaluate(() => window.stHost.executeSlashCommand('/recall vault code'));
    assert.match(recalled, /4417/);
    const status = await page.evaluate(() => window.stHost.executeSlashCommand('/memory-status'));
    assert.match(status, /connected/);
    assert.match(status, /This chat: \d+ messages, all remembered, as \d+ memories\./);
});

test('editing the message changes the memory', async () => {
    const CHAT = 'Elena - edited fact';
    await openChat(CHAT, factChat(VAULT));
    assert.ok((await memoryTexts(CHAT)).some(t => t.includes('4417')));
    const index = await page.evaluate(() => window.stHost.chat.findIndex(m => m.mes.includes('4417')));
    await page.evaluate(i => window.stHost.editMessage(i, 'The vault code is 9921. Keep it secret.'), index);
    await settled(CHAT);
    await waitFor(async () => {
        const texts = await memoryTexts(CHAT);
        return texts.some(t => t.includes('9921')) && !texts.some(t => t.includes('4417'));
    }, { timeoutMs: LOADED_MS, what: 'the edited fact to replace the old one' });
    const record = await send('Remind me of the vault code, please.');
    const injected = injectedOf(record);
    assert.ok(injected);
    assert.match(injected.message.content, /9921/);
    assert.doesNotMatch(injected.message.content, /4417/);
});

test('deleting the message removes its memory', async () => {
    const CHAT = 'Elena - deleted fact';
    await openChat(CHAT, factChat('The vault code is 9921. Keep it secret.'));
    assert.ok((await memoryTexts(CHAT)).some(t => t.includes('9921')));
    const index = await page.evaluate(() => window.stHost.chat.findIndex(m => m.mes.includes('9921')));
    await page.evaluate(i => window.stHost.deleteMessage(i), index);
    await settled(CHAT);
    await waitFor(async () => !(await memoryTexts(CHAT)).some(t => t.includes('9921')), { timeoutMs: LOADED_MS, what: 'the deleted fact to disappear' });
});

test('swiping follows the visible reply', async () => {
    const CHAT = 'Elena - swipes';
    await openChat(CHAT, chatHistory(smallTalk(2)));
    await page.evaluate(text => window.stHost.backendReplies.push(text), BLUE_STONE);
    await send('Where is the lighthouse key?');
    await settled(CHAT);
    await waitFor(async () => (await memoryTexts(CHAT)).some(t => t.includes('blue stone')), { timeoutMs: LOADED_MS, what: 'the first swipe to be remembered' });

    await page.evaluate(() => window.stHost.backendReplies.push('The lighthouse has no key at all; the door is never locked.'));
    await page.evaluate(() => window.stHost.swipeRight());
    await settled(CHAT);
    await waitFor(async () => {
        const texts = await memoryTexts(CHAT);
        return texts.some(t => t.includes('never locked')) && !texts.some(t => t.includes('blue stone'));
    }, { timeoutMs: LOADED_MS, what: 'the new swipe to replace the old one' });

    await page.evaluate(() => window.stHost.swipeLeft());
    await settled(CHAT);
    await waitFor(async () => {
        const texts = await memoryTexts(CHAT);
        return texts.some(t => t.includes('blue stone')) && !texts.some(t => t.includes('never locked'));
    }, { timeoutMs: LOADED_MS, what: 'swiping back to restore the first reply' });
});

test('the memory browser lists, searches, pins, edits and archives', async () => {
    const CHAT = 'Elena - memory browser';
    await openChat(CHAT, chatHistory([['Where is the lighthouse key?', BLUE_STONE], ...smallTalk(2)]));
    await stack.showSection('stbme_show_browser', 'stbme_browser', true);
    await withCleanup(async () => {
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
        const [from, to] = (await node(CHAT, id)).seq_range;
        assert.equal(from, to, 'the fact comes from one message');
        const meta = await page.textContent(`${row} .stbme_meta`);
        assert.match(meta, new RegExp(`\\bmsg ${from}\\b`));
        assert.doesNotMatch(meta, /msgs/);
        await (await page.$('#stbme_browser')).screenshot({ path: path.join(SCREENSHOTS, 'memory-browser.png') });
        const button = action => `#stbme_browser_list .stbme_node[data-id="${id}"] button[data-action="${action}"]`;
        await page.click(`${row} button[data-action="pin"]`);
        await waitFor(async () => (await node(CHAT, id)).pinned, { timeoutMs: LOADED_MS, what: 'pinned' });

        await page.click(button('edit'));
        const labels = await page.$$eval(`#stbme_browser_list .stbme_node[data-id="${id}"] .stbme_editor label`, els => els.map(e => e.textContent));
        assert.ok(labels.some(l => /^Summary\b/.test(l)), labels.join(', '));
        for (const label of labels) assert.match(label, /^[A-Z]/, 'words, not raw field names');
        const summary = `#stbme_browser_list .stbme_node[data-id="${id}"] textarea[data-field="summary"]`;
        await page.fill(summary, 'The lighthouse key is hidden under the blue stone by the well.');
        // The list drawn again while editing (a memory changed in the background, the pin's own refresh
        // arriving late) keeps the editor and what is typed in it.
        await page.evaluate(id => { document.querySelector(`#stbme_browser_list .stbme_node[data-id="${id}"]`).dataset.before = '1'; }, id);
        await page.click('#stbme_browser_search');
        await waitFor(() => page.evaluate(id => {
            const row = document.querySelector(`#stbme_browser_list .stbme_node[data-id="${id}"]`);
            return !!row && !row.dataset.before;
        }, id), { timeoutMs: LOADED_MS, what: 'the list drawn again' });
        assert.equal(await page.evaluate(sel => document.querySelector(sel)?.value ?? null, summary),
            'The lighthouse key is hidden under the blue stone by the well.');
        await page.click(button('save'));
        await waitFor(async () => (await node(CHAT, id)).fields.summary.includes('by the well'), { timeoutMs: LOADED_MS, what: 'edited' });

        await page.click(button('lock'));
        await waitFor(async () => (await node(CHAT, id)).locked, { timeoutMs: LOADED_MS, what: 'locked' });
        await page.click(button('archive'));
        await waitFor(async () => (await node(CHAT, id)).archived, { timeoutMs: LOADED_MS, what: 'archived' });
        await page.check('#stbme_browser_archived');
        await page.click('#stbme_browser_search');
        await page.click(button('restore'));
        await waitFor(async () => !(await node(CHAT, id)).archived, { timeoutMs: LOADED_MS, what: 'restored' });
    }, async () => {
        await page.uncheck('#stbme_browser_archived');
        await stack.showSection('stbme_show_browser', 'stbme_browser', false);
    });
});

test('the browser shows the newest search: a slower answer to an earlier one does not replace it', async () => {
    const CHAT = 'Elena - two searches';
    await openChat(CHAT, chatHistory([['Where is the lighthouse key?', BLUE_STONE], ...smallTalk(2)]));
    await stack.showSection('stbme_show_browser', 'stbme_browser', true);
    // In the page: the answer to a search for "lighthouse" is held until released; `handled` is set by a
    // timer started when the extension has read it, so it runs after everything the extension does with it
    // (that is promise continuations only, which all run before any timer).
    await page.evaluate(() => {
        const original = window.fetch;
        let release;
        const gate = new Promise(resolve => { release = resolve; });
        window.__held = { asked: false, handled: false, release, original };
        window.fetch = async (...args) => {
            const url = String(args[0] instanceof Request ? args[0].url : args[0]);
            if (!/\/nodes\?.*q=lighthouse/.test(url)) return original(...args);
            window.__held.asked = true;
            const response = await original(...args);
            await gate;
            const read = response.text.bind(response);
            response.text = async () => {
                const text = await read();
                setTimeout(() => { window.__held.handled = true; });
                return text;
            };
            return response;
        };
    });
    await withCleanup(async () => {
        await page.fill('#stbme_browser_q', 'lighthouse');
        await page.click('#stbme_browser_search');
        await page.waitForFunction(() => window.__held.asked);
        await page.fill('#stbme_browser_q', '');
        await page.click('#stbme_browser_search');
        const all = (await api('GET', `/v1/chats/${enc(CHAT)}/nodes?limit=20`)).data.total;
        const unfiltered = `1–${all} of ${all}`;
        await waitFor(async () => await page.textContent('#stbme_browser_info') === unfiltered,
            { timeoutMs: LOADED_MS, what: `the unfiltered list (${all} memories)` });
        await page.evaluate(() => window.__held.release());
        await page.waitForFunction(() => window.__held.handled);
        assert.equal(await page.textContent('#stbme_browser_info'), unfiltered, 'the older answer was dropped');
        assert.equal(await page.$$eval('#stbme_browser_list .stbme_node', els => els.length) > 1, true);
    }, async () => {
        await page.evaluate(() => { window.__held.release(); window.fetch = window.__held.original; });
        await page.fill('#stbme_browser_q', '');
        await stack.showSection('stbme_show_browser', 'stbme_browser', false);
    });
});

test("the browser lists every type the chat has, reads a long greeting as one row, edits a type's fields, explains Lock; screenshot", async () => {
    const CHAT = 'Elena - many kinds of memory';
    const greeting = 'The Silver Stag is the last inn before the pass, and tonight its common room is full. ' +
        'Rain drums on the shutters while traders from the coast argue over the price of salt, a bard tunes a lute ' +
        'with two missing strings, and the innkeeper, a broad woman called Hilde, keeps one eye on the door. ' +
        'Elena sits by the fire with her boots drying on the hearth and a map of the northern roads spread on her knees. ' +
        'She has marked three wells, crossed out a fourth, and circled the old watchtower where the caravan is meant to ' +
        'wait for the escort. When you come in, shaking the water from your cloak, she looks up, folds the map in half ' +
        'and pushes a stool towards you with her foot. "Sit," she says. "The escort is late, the wells are dry, and ' +
        'someone has been asking about us by name. Tell me what you saw on the road."';
    await openChat(CHAT, chatHistory(smallTalk(2), { greeting }));
    for (const body of [{ type: 'entity', fields: { name: 'The brass astrolabe', kind: 'object' } },
        { type: 'summary', fields: { summary: 'The caravan waits at the Silver Stag for a late escort.' } },
        { type: 'pov_memory', fields: { summary: 'Elena suspects a spy in the caravan.', about: 'the caravan' } }]) {
        assert.equal((await api('POST', `/v1/chats/${enc(CHAT)}/nodes`, body)).status, 200);
    }
    await stack.showSection('stbme_show_browser', 'stbme_browser', true);
    await withCleanup(async () => {
        await page.fill('#stbme_browser_q', '');
        await page.click('#stbme_browser_search');
        const counts = (await api('GET', `/v1/chats/${enc(CHAT)}/nodes?limit=1`)).data.types;
        const expected = ['All types', `Thing (${counts.entity})`, 'Summary (1)', 'Point of view (1)', `Character (${counts.character})`, `Event (${counts.event})`];
        const options = await waitFor(async () => {
            const shown = await page.$$eval('#stbme_browser_type option', els => els.map(o => o.textContent));
            return expected.every(t => shown.includes(t)) && shown;
        }, { timeoutMs: LOADED_MS, what: `the type filter to list ${expected.join(', ')}` });
        assert.equal(options.length, Object.keys(counts).length + 1, options.join(', '));
        for (const text of options) assert.doesNotMatch(text, /_/);

        // The greeting is stored as several pieces (extract.chunk_tokens); it reads as one row, once.
        const pieces = (await api('GET', `/v1/chats/${enc(CHAT)}/messages/0/memories`)).data.memories.filter(m => m.type === 'event');
        assert.ok(pieces.length >= 2, `the greeting is ${pieces.length} pieces`);
        const greetingRows = await page.$$eval('#stbme_browser_list .stbme_node', els => els
            .filter(el => /\bmsg 0\b/.test(el.querySelector('.stbme_meta').textContent) && el.querySelector('.stbme_type').textContent === 'Event')
            .map(el => ({ meta: el.querySelector('.stbme_meta').textContent, text: el.querySelector('.stbme_node_text').textContent })));
        assert.equal(greetingRows.length, 1, JSON.stringify(greetingRows));
        assert.match(greetingRows[0].meta, new RegExp(`${pieces.length} parts`));
        assert.ok(greetingRows[0].text.startsWith('The Silver Stag is the last inn') && greetingRows[0].text.includes('what you saw on the road'), greetingRows[0].text);

        // Lock, Pin and Archive are explained where a touch screen shows them, not only in tooltips.
        assert.match(await page.textContent('#stbme_browser .stbme_legend'), /Lock: .*never changes/);
        assert.ok(await page.isVisible('#stbme_browser .stbme_legend'));
        if (process.env.STBME_DOCS_SCREENSHOT) {
            fs.mkdirSync(path.join(REPO, 'docs', 'img'), { recursive: true });
            await (await page.$('#stbme_browser')).screenshot({ path: path.join(REPO, 'docs', 'img', 'memory-browser.png') });
        }

        // The editor offers every field of the type, not only the ones it has.
        await page.selectOption('#stbme_browser_type', 'entity');
        await page.waitForFunction(n => document.querySelectorAll('#stbme_browser_list .stbme_node').length === n
            && [...document.querySelectorAll('#stbme_browser_list .stbme_type')].every(t => t.textContent === 'Thing'), counts.entity);
        const astrolabe = '#stbme_browser_list .stbme_node:has-text("The brass astrolabe")';
        await page.click(`${astrolabe} button[data-action="edit"]`);
        const labels = await page.$$eval(`${astrolabe} .stbme_editor label`, els => els.map(e => e.textContent));
        assert.deepEqual(labels, ['Name (needed)', 'Kind', 'Note', 'Importance (0–10)']);
        const entityId = await page.getAttribute(astrolabe, 'data-id');
        await page.fill(`${astrolabe} textarea[data-field="note"]`, 'Found in the cellar; it still turns.');
        await page.click(`${astrolabe} button[data-action="save"]`);
        await waitFor(async () => (await node(CHAT, entityId)).fields.note === 'Found in the cellar; it still turns.', { timeoutMs: LOADED_MS, what: 'the empty field filled in' });
    }, async () => {
        await page.selectOption('#stbme_browser_type', '');
        await stack.showSection('stbme_show_browser', 'stbme_browser', false);
    });
});

test('export downloads the memories; import accepts an original ST-BME graph', async () => {
    const CHAT = 'Elena - export and import';
    await openChat(CHAT, chatHistory(smallTalk(4)));
    await stack.showPanel(true);
    await page.$eval('#stbme_backup_group', d => { d.open = true; });
    const [download] = await Promise.all([page.waitForEvent('download'), page.click('#stbme_export')]);
    const exported = JSON.parse(fs.readFileSync(await download.path(), 'utf8'));
    assert.equal(exported.format, 'stbme-sidecar');
    assert.equal(exported.chat_id, CHAT);
    assert.ok(exported.nodes.length > 3);

    const count = async () => (await api('GET', `/v1/chats/${enc(CHAT)}/nodes?limit=1`)).data.total;
    const before = await count();
    await page.setInputFiles('#stbme_import_file', path.join(FIXTURES, 'st_bme_graph.json'));
    await waitFor(async () => await count() >= before + 3, { timeoutMs: LOADED_MS, what: 'imported nodes' });
    assert.ok((await memoryTexts(CHAT)).some(t => t.includes('astrolabe')));

    const n = await page.evaluate(() => window.toastr.toasts.length);
    await page.click('#stbme_reindex');
    await page.waitForFunction(k => window.toastr.toasts.slice(k).some(t => /Rebuilding the index/.test(t.message)), n);
    const errors = await page.evaluate(k => window.toastr.toasts.slice(k).filter(t => t.level === 'error'), n);
    assert.deepEqual(errors, []);
    await page.$eval('#stbme_backup_group', d => { d.open = false; });
});

test('per-chat settings: before_prompt for this chat only', async () => {
    const CHAT = 'Elena - per-chat settings';
    await openChat(CHAT, factChat('Alex and Elena found a brass astrolabe in the cellar.'));
    const globalPosition = (await api('GET', '/v1/settings')).data.settings['inject.position'];
    assert.notEqual(globalPosition, 'before_prompt');
    await stack.showPanel(true);
    const sel = '.stbme_field[data-setting="inject.position"]';
    await page.check('input[name="stbme_scope"][value="chat"]');
    await withCleanup(async () => {
        await page.selectOption(`${sel} select`, 'before_prompt');
        await waitFor(async () => (await api('GET', `/v1/chats/${enc(CHAT)}/settings`)).data.overrides?.['inject.position'] === 'before_prompt', { timeoutMs: LOADED_MS, what: 'override' });
        assert.equal((await api('GET', '/v1/settings')).data.settings['inject.position'], globalPosition, 'global unchanged');
        const record = await send('Anything about the astrolabe?');
        assert.equal(injectedOf(record), null, 'not in the chat');
        assert.match(record.prompt.beforeScenarioAnchor, /astrolabe/);
        // remove the override with the reset button
        await page.click(`${sel} .stbme_reset`);
        await waitFor(async () => !(await api('GET', `/v1/chats/${enc(CHAT)}/settings`)).data.overrides?.['inject.position'], { timeoutMs: LOADED_MS, what: 'override removed' });
    }, () => page.check('input[name="stbme_scope"][value="global"]'));
});

test('quiet generations and dry runs are ignored', async () => {
    await openChat('Elena - quiet generations', factChat(VAULT));
    await send('What was the vault code again?');
    const before = await page.evaluate(() => window.stbme.debug.lastInjection?.at);
    assert.ok(before);
    await page.evaluate(() => window.stHost.Generate('quiet'));
    await page.evaluate(() => window.stHost.Generate('normal', {}, true));
    assert.equal(await page.evaluate(() => window.stbme.debug.lastInjection?.at), before);
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
    await page.evaluate(() => window.stHost.selectCharacter(0));
    await page.evaluate(id => window.stHost.openCharacterChat(id), OLD);
    await waitFor(async () => (await api('GET', `/v1/chats/${enc(OLD)}/status`)).data.messages === 30, { timeoutMs: LOADED_MS, what: 'the old chat synced' });
    await api('PUT', `/v1/chats/${enc(OLD)}/settings`, { settings: { 'extract.enabled': null } });
    assert.equal((await api('GET', `/v1/chats/${enc(OLD)}/status`)).data.processed_upto, -1);

    await stack.showPanel(true);
    assert.equal(await page.isVisible('#stbme_history'), false);
    await page.click('#stbme_history_button');
    await page.waitForSelector('#stbme_history', { state: 'visible' });
    await page.waitForFunction(() => document.querySelector('#stbme_history_text')?.textContent.startsWith('Remembered: 30/30 messages (100%)'));
    assert.equal(await page.$eval('#stbme_history_bar', bar => bar.value), 1);
    const status = (await api('GET', `/v1/chats/${enc(OLD)}/status`)).data;
    assert.equal(status.processed_upto, 29);
    assert.ok(status.nodes >= 15 && status.unembedded === 0);
    await page.evaluate(chatId => window.stHost.openCharacterChat(chatId), DEFAULT_CHAT);
    assert.equal(await page.isVisible('#stbme_history'), false, 'the bar belongs to the chat it followed');
});

test('a chat change clears the slot; group chats sync; deleted chats offer to delete their memories', async () => {
    const SECOND = 'Elena - second chat';
    await openChat('Elena - before the chat change', factChat(VAULT));
    await send('What was the vault code again?');
    assert.match(await page.evaluate(() => window.stHost.extension_prompts.stbme_memory?.value), /4417/);
    await openChat(SECOND);
    assert.equal(await page.evaluate(() => window.stHost.extension_prompts.stbme_memory?.value), '');
    await send('A new story begins.');
    await settled(SECOND);

    const GROUP = 'Party - group chat 1';
    await page.evaluate(() => window.stHost.openGroupChat('g1'));
    await send('Hello, everyone.');
    await settled(GROUP);
    await page.evaluate(id => window.stHost.deleteGroupChat(id), GROUP);
    await waitFor(async () => (await api('GET', `/v1/chats/${enc(GROUP)}/status`)).status === 404, { timeoutMs: LOADED_MS, what: 'group chat memories deleted' });

    await withCleanup(async () => {
        await page.evaluate(() => { window.stHost.popupAnswer = 0; });
        await page.evaluate(id => window.stHost.deleteCharacterChat(id), SECOND);
        // The extension got past the question and kept the memories (a positive sign, not a pause).
        await page.waitForFunction(id => window.stbme.debug.lastDeleteOffer?.chatId === id && window.stbme.debug.lastDeleteOffer.outcome === 'kept', SECOND);
        assert.equal((await api('GET', `/v1/chats/${enc(SECOND)}/status`)).status, 200, 'kept when the user says no');
        await page.evaluate(() => { window.stHost.popupAnswer = 1; });
        await page.evaluate(id => window.stHost.deleteCharacterChat(id), SECOND);
        await waitFor(async () => (await api('GET', `/v1/chats/${enc(SECOND)}/status`)).status === 404, { timeoutMs: LOADED_MS, what: 'chat memories deleted' });
        const popups = await page.evaluate(() => window.stHost.popups.map(p => p.text));
        assert.ok(popups.some(t => t.includes(SECOND)));
    }, () => page.evaluate(() => { window.stHost.popupAnswer = 1; }));
});

test('through the ST server plugin when the user picks it', async () => {
    // Its own page: the route is page-wide state.
    const other = await stack.newPage();
    const p = stack.on(other);
    await withCleanup(async () => {
        const CHAT = 'Elena - through the plugin';
        await p.openChat(CHAT, factChat(BLUE_STONE, 'Elena taps her nose.'));
        await p.showPanel(true);
        await other.$eval('#stbme_connection_group', d => { d.open = true; });
        await other.selectOption('#stbme_connection', 'proxy');
        await other.waitForFunction(() => window.stbme.debug.connection === 'proxy');
        const before = stack.st.proxied.length;
        const record = await p.send('Where is the lighthouse key?');
        const injected = injectedOf(record);
        assert.ok(injected);
        assert.match(injected.message.content, /blue stone/);
        assert.ok(stack.st.proxied.slice(before).some(r => r.includes('/recall')), 'recall went through /api/plugins/stbme');
        // No WebSocket through ST's plugin router: the live channel (notices, progress, LLM relay) long-polls.
        await other.waitForFunction(() => window.stbme.debug.live?.route === 'long-poll' && window.stbme.debug.live.state === 'open');
        assert.ok(stack.st.proxied.some(r => r.includes('/v1/live/poll')), 'the live channel long-polls through the plugin');
        await other.screenshot({ path: path.join(SCREENSHOTS, 'proxy.png'), fullPage: true });

        // automatic: the direct URL is dead (a phone cannot reach the PC's 127.0.0.1), the plugin is used
        await other.selectOption('#stbme_connection', 'auto');
        await other.fill('#stbme_url', 'http://127.0.0.1:1');
        await other.$eval('#stbme_url', el => el.dispatchEvent(new Event('change')));
        await other.waitForFunction(() => window.stbme.debug.connection === 'proxy');
        const viaAuto = await p.send('And the blue stone?');
        assert.ok(injectedOf(viaAuto), 'memory through the automatic fallback');
    }, () => other.close());
});

test('installs from the repository layout (manifest at the root, code in st_extension/)', async () => {
    const other = await stack.newPage({ extensions: ['third-party/st-bme-sidecar-repo'] });
    await withCleanup(async () => {
        await other.waitForSelector('#extensions_settings2 #stbme_settings', { state: 'attached' });
        assert.equal(await other.evaluate(() => typeof window.stbme_generateInterceptor), 'function');
        await other.evaluate(() => window.stHost.selectCharacter(1));
        const record = await other.evaluate(() => window.stHost.Generate('normal', { text: 'Hello Marek.' }));
        assert.ok(record.reply);
    }, () => other.close());
});
