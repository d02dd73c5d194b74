// End to end: the settings panel as it sits in SillyTavern's Extensions drawer. Its own sidecar, since
// these tests change the memory LLM and other global settings (each puts them back).
import { test, before, after, afterEach } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { REPO, SCREENSHOTS, waitFor } from './support.mjs';
import { LOADED_MS, chatHistory, enc, smallTalk, startStack, withCleanup } from './stack.mjs';
import { JARGON, helpSaysMore } from '../../../st_extension/lib/setting_words.js';

/** @type {Awaited<ReturnType<typeof startStack>>} */
let stack;

before(async () => {
    stack = await startStack();
});

after(async () => {
    await stack?.close();
});

afterEach(() => {
    assert.deepEqual(stack.newErrors(), [], 'no uncaught errors in the page');
});

const globalSetting = async name => (await stack.api('GET', '/v1/settings')).data.settings[name];

/** Put global sidecar settings back as they were, through the API (the page is reloaded by the caller if it matters). */
async function restoreGlobal(values) {
    const res = await stack.api('PUT', '/v1/settings', { settings: values });
    assert.equal(res.status, 200, JSON.stringify(res.data));
}

/** A page of its own with the panel open: the panel as a user first sees it. */
async function freshPanel() {
    const page = await stack.newPage();
    const p = stack.on(page);
    await p.showPanel(true);
    await page.waitForSelector('.stbme_field[data-setting="recall.budget_tokens"]', { state: 'visible' });
    return p;
}

test('the panel renders the sidecar schema: a short basic view, the rest under Advanced; screenshot', async () => {
    const { page } = await freshPanel();
    await withCleanup(async () => {
        const schema = (await stack.api('GET', '/v1/settings/schema')).data.settings;
        for (const def of schema) assert.ok(await page.$(`.stbme_field[data-setting="${def.name}"]`), `control for ${def.name}`);
        // Basic: a few settings, visible at once; everything else is in Advanced, closed, its groups closed too.
        const basic = await page.$$eval('#stbme_sidecar_settings .stbme_basic > .stbme_field', els => els.map(e => e.dataset.setting));
        assert.ok(basic.length >= 6 && basic.length <= 12, `basic view: ${basic.join(', ')}`);
        for (const name of ['recall.budget_tokens', 'inject.position', 'inject.depth', 'llm.mode']) assert.ok(basic.includes(name), name);
        const shown = await page.$$eval('#stbme_sidecar_settings .stbme_basic > .stbme_field:not([hidden])', els => els.map(e => e.dataset.setting));
        for (const name of shown) assert.ok(await page.isVisible(`.stbme_field[data-setting="${name}"]`), `${name} is visible`);
        assert.equal(await page.$eval('details.stbme_advanced', d => d.open), false, 'Advanced starts closed');
        assert.equal(await page.isVisible('.stbme_field[data-setting="recall.min_similarity"]'), false);
        assert.equal(await page.$$eval('#stbme_sidecar_settings .stbme_field', els => els.length), schema.length, 'every setting once');
        await page.click('details.stbme_advanced > summary');
        const groups = await page.$$eval('details.stbme_advanced details.stbme_group', ds => ds.map(d => ({ group: d.dataset.group, open: d.open })));
        assert.ok(groups.length >= 5, JSON.stringify(groups));
        assert.ok(groups.every(g => !g.open), 'groups under Advanced start closed');
        await page.click('details.stbme_group[data-group="recall"] > summary');
        await page.waitForSelector('.stbme_field[data-setting="recall.min_similarity"]', { state: 'visible' });

        // Selects show words; the stored value stays the raw one.
        const position = await page.$eval('.stbme_field[data-setting="inject.position"] select', el => ({
            value: el.value, shown: el.selectedOptions[0].textContent, options: [...el.options].map(o => o.textContent),
        }));
        assert.equal(position.value, await globalSetting('inject.position'));
        assert.equal(position.shown, 'In the chat, at a depth');
        for (const text of position.options) assert.doesNotMatch(text, /_/);
        assert.equal(await page.$eval('.stbme_field[data-setting="inject.role"] select', el => el.selectedOptions[0].textContent), 'System');
        await page.click('details.stbme_group[data-group="recall"] > summary');
        await page.click('details.stbme_advanced > summary');
        await (await page.$('#stbme_settings')).screenshot({ path: path.join(SCREENSHOTS, 'settings-panel.png') });
        if (process.env.STBME_DOCS_SCREENSHOT) {
            fs.mkdirSync(path.join(REPO, 'docs', 'img'), { recursive: true });
            await (await page.$('#stbme_settings')).screenshot({ path: path.join(REPO, 'docs', 'img', 'settings-panel.png') });
        }
    }, () => page.close());
});

test('the actions come first: Memories used, Browse memories and Remember history sit above every setting', async () => {
    const { page } = await freshPanel();
    await withCleanup(async () => {
        const top = await page.$eval('#stbme_settings .inline-drawer-content', el => el.getBoundingClientRect().top);
        const firstSetting = await page.$eval('#stbme_sidecar_settings .stbme_field:not([hidden])', el => el.getBoundingClientRect().top);
        for (const id of ['stbme_show_used', 'stbme_show_browser', 'stbme_history_button']) {
            const box = await page.$eval(`#${id}`, el => el.getBoundingClientRect().toJSON());
            assert.ok(await page.isVisible(`#${id}`), id);
            assert.ok(box.bottom < firstSetting, `${id} is above the first setting`);
            assert.ok(box.top - top < 200, `${id} is near the top of the panel (${Math.round(box.top - top)} px down)`);
        }
        // The rest of the extension's own settings and the maintenance buttons are folded away.
        for (const id of ['stbme_connection_group', 'stbme_backup_group']) assert.equal(await page.$eval(`#${id}`, d => d.open), false, id);
        assert.equal(await page.isVisible('#stbme_reindex'), false);
    }, () => page.close());
});

test('a field shows only when it applies: the LLM API fields for an API, the depth and role for a block in the chat', async () => {
    const { page } = await freshPanel();
    const before = { 'llm.mode': await globalSetting('llm.mode'), 'llm.url': await globalSetting('llm.url') };
    assert.equal(before['llm.mode'], 'none');
    const visible = name => page.isVisible(`.stbme_field[data-setting="${name}"]`);
    const mode = '.stbme_field[data-setting="llm.mode"] select';
    await withCleanup(async () => {
        for (const name of ['llm.url', 'llm.key', 'llm.model', 'extract.every']) assert.equal(await visible(name), false, `${name} without an LLM`);
        // Advanced: the groups that only an LLM uses are gone as a whole.
        await page.click('details.stbme_advanced > summary');
        for (const group of ['dedupe', 'evolve', 'maintain', 'prompts']) {
            assert.equal(await page.isVisible(`details.stbme_group[data-group="${group}"]`), false, `${group} without an LLM`);
        }
        await page.click('details.stbme_advanced > summary');

        await page.selectOption(mode, 'relay');
        await waitFor(async () => await globalSetting('llm.mode') === 'relay', { timeoutMs: LOADED_MS, what: 'relay saved' });
        await page.waitForSelector('.stbme_field[data-setting="extract.every"]', { state: 'visible' });
        for (const name of ['llm.url', 'llm.key', 'llm.model']) assert.equal(await visible(name), false, `${name} with the relay`);

        // An API needs its URL first: the URL field appears with the choice, the choice waits for it.
        await page.selectOption(mode, 'openai');
        await page.waitForSelector('.stbme_field[data-setting="llm.url"]', { state: 'visible' });
        for (const name of ['llm.key', 'llm.model', 'extract.every']) assert.equal(await visible(name), true, `${name} with an API`);
        await page.waitForFunction(s => /LLM API URL/.test(document.querySelector(`${s} .stbme_field_error`).textContent), '.stbme_field[data-setting="llm.mode"]');
        assert.doesNotMatch(await page.textContent('.stbme_field[data-setting="llm.mode"] .stbme_field_error'), JARGON);
        assert.equal(await globalSetting('llm.mode'), 'relay', 'not saved without a URL');
        await page.fill('.stbme_field[data-setting="llm.url"] input', 'http://127.0.0.1:9/v1');
        await page.$eval('.stbme_field[data-setting="llm.url"] input', el => el.dispatchEvent(new Event('change')));
        await waitFor(async () => await globalSetting('llm.mode') === 'openai', { timeoutMs: LOADED_MS, what: 'the API mode saved once its URL is' });
        assert.equal(await page.textContent('.stbme_field[data-setting="llm.mode"] .stbme_field_error'), '');

        await page.selectOption(mode, 'none');
        await waitFor(async () => await globalSetting('llm.mode') === 'none', { timeoutMs: LOADED_MS, what: 'none saved' });
        await page.waitForSelector('.stbme_field[data-setting="llm.url"]', { state: 'hidden' });

        const position = '.stbme_field[data-setting="inject.position"] select';
        await page.selectOption(position, 'before_prompt');
        await page.waitForSelector('.stbme_field[data-setting="inject.depth"]', { state: 'hidden' });
        assert.equal(await visible('inject.role'), false);
        await page.selectOption(position, 'in_chat');
        await page.waitForSelector('.stbme_field[data-setting="inject.depth"]', { state: 'visible' });
    }, async () => {
        await restoreGlobal({ ...before, 'inject.position': 'in_chat' });
        await page.close();
    });
});

test('no placeholder, select or badge is cut off or wrapped, on a phone-wide panel too', async () => {
    const { page } = await freshPanel();
    await withCleanup(async () => {
        // Open every part of the panel that has inputs.
        await page.$$eval('#stbme_settings details', ds => { for (const d of ds) d.open = true; });
        await page.$eval('#stbme_browser', el => { el.hidden = false; });
        for (const width of ['480px', '360px']) {
            await page.$eval('#top', (el, w) => { el.style.width = w; }, width);
            const problems = await page.$$eval('#stbme_settings', ([root]) => {
                const canvas = document.createElement('canvas').getContext('2d');
                const fontOf = style => `${style.fontStyle} ${style.fontWeight} ${style.fontSize} ${style.fontFamily}`;
                const room = el => {
                    const style = getComputedStyle(el);
                    return el.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
                };
                const shown = el => el.offsetParent !== null;
                const out = [];
                for (const el of root.querySelectorAll('input[placeholder], textarea[placeholder]')) {
                    if (!el.placeholder || !shown(el)) continue;
                    canvas.font = fontOf(getComputedStyle(el));
                    const need = canvas.measureText(el.placeholder).width;
                    if (need > room(el)) out.push(`placeholder ${el.id || el.dataset.stbmeServerSetting}: "${el.placeholder}" needs ${Math.ceil(need)}px, has ${Math.floor(room(el))}px`);
                }
                for (const el of root.querySelectorAll('select')) {
                    if (!shown(el)) continue;
                    canvas.font = fontOf(getComputedStyle(el));
                    for (const option of el.options) {
                        const need = canvas.measureText(option.textContent).width;
                        if (need > room(el)) out.push(`select ${el.id || el.dataset.stbmeServerSetting}: "${option.textContent}" needs ${Math.ceil(need)}px, has ${Math.floor(room(el))}px`);
                    }
                }
                // A badge or a radio's label on two lines.
                for (const el of root.querySelectorAll('.stbme_badge, .stbme_scope_choice label')) {
                    if (!shown(el)) continue;
                    const line = parseFloat(getComputedStyle(el).lineHeight) || parseFloat(getComputedStyle(el).fontSize) * 1.4;
                    if (el.getBoundingClientRect().height > line * 1.6) out.push(`"${el.textContent.trim()}" wraps (${Math.round(el.getBoundingClientRect().height)}px high)`);
                }
                const radios = [...root.querySelectorAll('.stbme_scope_choice label')].map(el => el.getBoundingClientRect().top);
                if (radios.length === 2 && Math.abs(radios[0] - radios[1]) > 2) out.push('"All chats" and "This chat" sit on different lines');
                return out;
            });
            assert.deepEqual(problems, [], `at ${width}`);
        }
    }, () => page.close());
});

test('help texts speak in words and say more than their labels', async () => {
    const { page } = await freshPanel();
    await withCleanup(async () => {
        await page.$$eval('#stbme_settings details', ds => { for (const d of ds) d.open = true; });
        const fields = await page.$$eval('#stbme_sidecar_settings .stbme_field[data-setting]', els => els.map(el => ({
            name: el.dataset.setting,
            basic: !!el.closest('.stbme_basic'),
            label: (el.querySelector('.stbme_field_head label span') ?? el.querySelector('.stbme_field_head label')).textContent.replace(/\s*\([^)]*\)\s*$/, ''),
            help: el.querySelector(':scope > .stbme_help').textContent,
            options: [...el.querySelectorAll('option')].map(o => o.textContent),
        })));
        const jargon = fields.filter(f => JARGON.test(f.help) || JARGON.test(f.label) || f.options.some(o => JARGON.test(o)));
        assert.deepEqual(jargon.map(f => `${f.name}: ${f.help}`), []);
        const repeats = fields.filter(f => f.basic && !helpSaysMore(f.label, f.help));
        assert.deepEqual(repeats.map(f => `${f.label}: ${f.help}`), []);
        assert.doesNotMatch(await page.textContent('.stbme_field[data-setting="llm.mode"]'), /'none'|'openai'|'relay'/);
    }, () => page.close());
});

test('the status line and /memory-status speak of messages, not of indexes or internals', async () => {
    const CHAT = 'Elena - not remembered yet';
    // Stored but not turned into memories: the status line must not read "memories up to #-1".
    const p = stack.on(stack.page);
    await stack.api('PUT', `/v1/chats/${enc(CHAT)}/settings`, { settings: { 'extract.enabled': false } });
    await withCleanup(async () => {
        await stack.page.evaluate(([id, messages]) => { window.stHost.chatFiles[id] = messages; }, [CHAT, chatHistory(smallTalk(1))]);
        await stack.page.evaluate(() => window.stHost.selectCharacter(0));
        await stack.page.evaluate(id => window.stHost.openCharacterChat(id), CHAT);
        await waitFor(async () => (await stack.api('GET', `/v1/chats/${enc(CHAT)}/status`)).data.messages === 3, { timeoutMs: LOADED_MS, what: 'the chat stored' });
        await p.showPanel(true);
        await stack.page.waitForFunction(() => /3 messages, not remembered yet/.test(document.getElementById('stbme_status_text').textContent));
        const line = await stack.page.textContent('#stbme_status_text');
        assert.doesNotMatch(line, /#-?\d|\b1 messages\b|memories up to/);

        await stack.api('PUT', `/v1/chats/${enc(CHAT)}/settings`, { settings: { 'extract.enabled': null } });
        await stack.api('POST', `/v1/chats/${enc(CHAT)}/process`, {});
        await p.settled(CHAT);
        const status = await stack.page.evaluate(() => window.stHost.executeSlashCommand('/memory-status'));
        assert.match(status, /^Memory: connected/);
        assert.match(status, /This chat: 3 messages, all remembered, as \d+ memories\./);
        assert.doesNotMatch(status, new RegExp(`${CHAT}|embedder|vectors|e5|processed up to|Jobs pending`));
    }, () => stack.api('PUT', `/v1/chats/${enc(CHAT)}/settings`, { settings: { 'extract.enabled': null } }));
});

test('a setting change is validated by the sidecar and errors show next to the field', async () => {
    const { page } = await freshPanel();
    await page.check('input[name="stbme_scope"][value="global"]');
    const sel = '.stbme_field[data-setting="recall.budget_tokens"]';
    const original = await globalSetting('recall.budget_tokens');
    const change = async value => {
        await page.fill(`${sel} input`, String(value));
        await page.$eval(`${sel} input`, el => el.dispatchEvent(new Event('change')));
    };
    await withCleanup(async () => {
        await change(1);
        await page.waitForFunction(s => document.querySelector(`${s} .stbme_field_error`).textContent.includes('minimum'), sel);
        assert.equal(await globalSetting('recall.budget_tokens'), original, 'nothing changed');
        const next = original === 600 ? 700 : 600;
        await change(next);
        await waitFor(async () => await globalSetting('recall.budget_tokens') === next, { timeoutMs: LOADED_MS, what: `budget ${next}` });
        await page.waitForFunction(s => !document.querySelector(s).classList.contains('stbme_saving'), sel);
        assert.equal(await page.$eval(`${sel} .stbme_field_error`, el => el.textContent), '');
    }, async () => {
        await restoreGlobal({ 'recall.budget_tokens': original });
        await page.close();
    });
});
