// End to end: memory you can see in the chat itself. A marker on each remembered message (lit when the
// message fed the last reply's memory block) with its memories on click, and a long ingest's progress
// above the input bar, with the Extensions drawer closed. The chat is ST's DOM (host/index.html
// #message_template, st-host.js addOneMessage and friends).
import { test, before, after, afterEach } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { REPO, SCREENSHOTS, waitFor } from './support.mjs';
import { LOADED_MS, chatHistory, enc, smallTalk, startStack, withCleanup } from './stack.mjs';

const VAULT = 'The vault code is 4417. Keep it secret.';

/** @type {Awaited<ReturnType<typeof startStack>>} */
let stack;
let page;

before(async () => {
    stack = await startStack();
    ({ page } = stack);
});

after(async () => {
    await stack?.close();
});

afterEach(() => {
    assert.deepEqual(stack.newErrors(), [], 'no uncaught errors in the page');
});

/** Each shown message's marker: {mesid: state} ('remembered' | 'used'); messages without one are left out. */
const markers = () => page.$$eval('#chat .mes[mesid]', els => Object.fromEntries(els
    .map(el => [el.getAttribute('mesid'), el.querySelector('.stbme_mes_marker')?.dataset.state])
    .filter(([, state]) => state)));

/** Wait until every shown message up to `last` has a marker. */
async function markedThrough(last) {
    return waitFor(async () => {
        const marks = await markers();
        return Array.from({ length: last + 1 }, (_, i) => String(i)).every(i => marks[i]) && marks;
    }, { timeoutMs: LOADED_MS, what: `markers on messages 0-${last}` });
}

async function docsShot(element, name) {
    await element.screenshot({ path: path.join(SCREENSHOTS, name) });
    if (process.env.STBME_DOCS_SCREENSHOT) {
        fs.mkdirSync(path.join(REPO, 'docs', 'img'), { recursive: true });
        await element.screenshot({ path: path.join(REPO, 'docs', 'img', name) });
    }
}

test('a remembered message carries a faint marker; the one behind the last reply is lit; a click shows its memories; screenshot', async () => {
    const CHAT = 'Elena - marked messages';
    await stack.openChat(CHAT, chatHistory([[VAULT, 'Elena nods slowly.'], ...smallTalk(3)]));
    const marks = await markedThrough(8);
    assert.ok(Object.values(marks).every(s => s === 'remembered'), JSON.stringify(marks));

    // ST's look: an icon of ST's Font Awesome in the message's name line, after the time, like ST's own ghost icon.
    const marker = '#chat .mes[mesid="1"] .stbme_mes_marker';
    const look = await page.$eval(marker, el => ({
        inNameLine: !!el.closest('.ch_name') && el.previousElementSibling?.classList.contains('timestamp'),
        icon: getComputedStyle(el, '::before').content,
        font: getComputedStyle(el, '::before').fontFamily,
        classes: [...el.classList],
        title: el.title,
        focusable: el.tabIndex === 0,
    }));
    assert.ok(look.inNameLine, JSON.stringify(look));
    assert.ok(look.classes.includes('fa-solid') && look.classes.includes('fa-brain'), look.classes.join(' '));
    assert.match(look.font, /Font Awesome 6 Free/);
    assert.notEqual(look.icon, 'none');
    assert.ok(look.focusable);
    assert.match(look.title, /^Remembered: \d+ memor(y|ies)\. Click to see them\.$/);

    // The reply's memory block drew on message 1: its marker lights, the small talk's stay faint.
    const record = await page.evaluate(() => window.stHost.Generate('normal', { text: 'What was the vault code again?' }));
    assert.ok(record.prompt.messages.some(m => m.injected && /4417/.test(m.content)), 'the fact was injected');
    await page.waitForFunction(s => document.querySelector(s)?.dataset.state === 'used', marker);
    assert.match(await page.getAttribute(marker, 'title'), /in the memory block of the last reply/);
    assert.equal(await page.$eval(marker, el => el.classList.contains('stbme_used')), true);
    const color = await page.$eval(marker, el => getComputedStyle(el).color);
    const quote = await page.evaluate(() => {
        const probe = document.createElement('span');
        probe.style.color = 'var(--SmartThemeQuoteColor)';
        document.body.append(probe);
        const c = getComputedStyle(probe).color;
        probe.remove();
        return c;
    });
    assert.equal(color, quote, "lit in the theme's quote colour");
    await stack.settled(CHAT);
    await markedThrough(10); // the question and its reply are remembered too
    await docsShot(await page.$('#chat'), 'in-chat-marker.png');

    // A click opens ST's popup with the memories behind the message, the one used marked as such.
    await page.click(marker);
    const popup = 'dialog.popup[open] .stbme_message_memories[data-index="1"]';
    await page.waitForSelector(popup, { state: 'visible' });
    await withCleanup(async () => {
        const items = await page.$$eval(`${popup} .stbme_memory_list li`, els => els.map(el => el.textContent));
        assert.ok(items.some(t => t.includes('4417') && t.includes('in the last reply’s memory block')), JSON.stringify(items));
        assert.match(await page.textContent(`${popup} h3`), /Memories from message #1/);
        assert.equal(await page.$eval(`${popup} .stbme_memory_list`, el => getComputedStyle(el).textAlign), 'left');
        await docsShot(await page.$('dialog.popup[open]'), 'in-chat-memories.png');
    }, async () => {
        await page.evaluate(() => window.stHost.closePopup());
        await page.waitForSelector('dialog.popup', { state: 'detached' });
    });
    // The keyboard opens it too.
    await page.focus('#chat .mes[mesid="3"] .stbme_mes_marker');
    await page.keyboard.press('Enter');
    await page.waitForSelector('dialog.popup[open] .stbme_message_memories[data-index="3"]', { state: 'visible' });
    await page.evaluate(() => window.stHost.closePopup());
    await page.waitForSelector('dialog.popup', { state: 'detached' });
});

test('the markers follow the chat: a deletion that renumbers messages, an edit, a chat change, the switch in the panel', async () => {
    const CHAT = 'Elena - markers follow';
    await stack.openChat(CHAT, chatHistory([[VAULT, 'Elena nods slowly.'], ...smallTalk(3)]));
    await page.evaluate(() => window.stHost.Generate('normal', { text: 'What was the vault code again?' }));
    await page.waitForFunction(() => document.querySelector('#chat .mes[mesid="1"] .stbme_mes_marker')?.dataset.state === 'used');
    await stack.settled(CHAT);

    // Deleting message 1 renumbers every later message (ST's updateViewMessageIds): the lit marker must not
    // move to the message now numbered 1, and every message is marked again once the sidecar caught up.
    await page.evaluate(() => window.stHost.deleteMessage(1));
    await stack.settled(CHAT);
    const length = await page.evaluate(() => window.stHost.chat.length);
    const marks = await markedThrough(length - 1);
    assert.ok(Object.values(marks).every(s => s === 'remembered'), `nothing lit after the deletion: ${JSON.stringify(marks)}`);
    const popup = await stack.api('GET', `/v1/chats/${enc(CHAT)}/messages/1/memories`);
    assert.ok(!JSON.stringify(popup.data).includes('4417'), 'the deleted fact is gone');

    // A message the sidecar has not processed has no marker; it gets one when it is remembered.
    await stack.api('PUT', `/v1/chats/${enc(CHAT)}/settings`, { settings: { 'extract.enabled': false } });
    await withCleanup(async () => {
        await page.evaluate(() => window.stHost.editMessage(2, 'Tell me about the lighthouse keeper.'));
        await waitFor(async () => !(await markers())['2'], { timeoutMs: LOADED_MS, what: 'the edited message unmarked while not processed' });
    }, () => stack.api('PUT', `/v1/chats/${enc(CHAT)}/settings`, { settings: { 'extract.enabled': null } }));
    await stack.api('POST', `/v1/chats/${enc(CHAT)}/process`, {});
    await stack.settled(CHAT);
    await markedThrough(length - 1);

    // Another chat: its own markers only.
    await stack.openChat('Elena - another chat');
    await waitFor(async () => JSON.stringify(await markers()) === '{"0":"remembered"}', { timeoutMs: LOADED_MS, what: 'the new chat marked alone' });

    // The panel's switch takes them away and brings them back.
    await stack.showPanel(true);
    await page.$eval('#stbme_connection_group', d => { d.open = true; });
    await withCleanup(async () => {
        await page.uncheck('#stbme_chat_markers');
        await page.waitForFunction(() => !document.querySelector('#chat .stbme_mes_marker'));
        await page.check('#stbme_chat_markers');
        await markedThrough(0);
    }, async () => {
        await page.check('#stbme_chat_markers');
        await page.$eval('#stbme_connection_group', d => { d.open = false; });
        await stack.showPanel(false);
    });
});

test('a long ingest shows its progress above the input bar with the drawer closed, and says when it is done', async () => {
    const OLD = 'Elena - a long old chat';
    const history = chatHistory(Array.from({ length: 20 }, (_, i) => [`What happened on day ${i}?`, `On day ${i} the caravan reached well number ${i}.`]));
    await stack.showPanel(false);
    await stack.api('PUT', `/v1/chats/${enc(OLD)}/settings`, { settings: { 'extract.enabled': false } });
    await page.evaluate(([id, messages]) => { window.stHost.chatFiles[id] = messages; }, [OLD, history]);
    await page.evaluate(() => window.stHost.selectCharacter(0));
    await page.evaluate(id => window.stHost.openCharacterChat(id), OLD);
    await waitFor(async () => (await stack.api('GET', `/v1/chats/${enc(OLD)}/status`)).data.messages === history.length, { timeoutMs: LOADED_MS, what: 'the old chat stored' });
    await stack.api('PUT', `/v1/chats/${enc(OLD)}/settings`, { settings: { 'extract.enabled': null } });

    // Record every text the bar shows (it may come and go quickly on an idle machine).
    await page.evaluate(() => {
        window.stbmeBarSeen = [];
        new MutationObserver(() => {
            const bar = document.getElementById('stbme_chat_progress');
            if (bar && !bar.hidden) window.stbmeBarSeen.push(bar.textContent);
        }).observe(document.getElementById('sheld'), { subtree: true, childList: true, characterData: true, attributes: true });
    });
    const toasts = await page.evaluate(() => window.toastr.toasts.length);
    // Processing started from outside the panel (as `stbme ingest` into a running sidecar would).
    assert.equal((await stack.api('POST', `/v1/chats/${enc(OLD)}/process`, {})).status, 200);
    await page.waitForFunction(() => window.stbmeBarSeen.length > 0);
    assert.equal(await page.isVisible('#stbme_settings .inline-drawer-content'), false, 'the drawer stayed closed');
    const seen = await page.evaluate(() => window.stbmeBarSeen);
    assert.match(seen[0], /Remembering: \d+\/41 messages/);
    assert.equal(await page.$eval('#stbme_chat_progress', el => el.nextElementSibling?.id), 'form_sheld', 'just above the input bar');
    await stack.settled(OLD);
    await page.waitForSelector('#stbme_chat_progress', { state: 'hidden' });
    await page.waitForFunction(k => window.toastr.toasts.slice(k).some(t => t.level === 'success' && /This chat is remembered \(41 messages\)/.test(t.message)), toasts);
    await markedThrough(history.length - 1);
});
