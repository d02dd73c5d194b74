// One end-to-end stack per test file: a real `stbme serve`, the ST stand-in page with the real extension,
// headless Chromium, and the helpers every test uses to set up its own state. A test opens its own chat
// (with the history it needs), sets the settings it relies on, and undoes what it changed in page-wide
// state, so no test depends on what an earlier one left behind.
import fs from 'node:fs';
import assert from 'node:assert/strict';
import { LOADED_MS, freePort, launchBrowser, SCREENSHOTS, startSidecar, startStHost, waitFor } from './support.mjs';

export { LOADED_MS };

/** The extension's own settings in the test pages: deadlines for a loaded machine, a quick sync. */
export const PAGE_SETTINGS = Object.freeze({
    connection: 'direct', syncDebounceMs: 300, recallTimeoutMs: 60000, syncTimeoutMs: 30000, requestTimeoutMs: 60000,
});

/** Console noise of a sidecar that is down on purpose, not a bug of the page. */
const EXPECTED_ERRORS = /Failed to load resource|ERR_CONNECTION_REFUSED|WebSocket connection/;

export const enc = encodeURIComponent;

/**
 * Run `body`, then `cleanup` whatever happened. When the body failed, its error is the one reported: a
 * cleanup that fails too (often because of the same cause) is logged, never thrown over it.
 * @template T
 * @param {() => Promise<T>} body
 * @param {() => Promise<void>} cleanup
 * @returns {Promise<T>}
 */
export async function withCleanup(body, cleanup) {
    let failed = false;
    try {
        return await body();
    } catch (error) {
        failed = true;
        throw error;
    } finally {
        try {
            await cleanup();
        } catch (error) {
            if (!failed) throw error;
            console.error(`# cleanup after the failure above also failed: ${error.message}`);
        }
    }
}

/**
 * ST chat messages: a greeting, then [user, assistant] pairs, as ST stores a chat file.
 * @param {[string, string][]} pairs
 * @param {{character?: string, greeting?: string}} [options]
 */
export function chatHistory(pairs, { character = 'Elena', greeting = 'Welcome to the Silver Stag, traveller.' } = {}) {
    const message = (isUser, text) => ({
        name: isUser ? 'Alex' : character, is_user: isUser, is_system: false, send_date: '2024-10-18T20:00:00.000Z',
        mes: text, swipe_id: 0, swipes: isUser ? undefined : [text], extra: {},
    });
    return [message(false, greeting), ...pairs.flatMap(([user, reply]) => [message(true, user), message(false, reply)])];
}

/** Filler turns with nothing worth recalling (`n` pairs). */
export function smallTalk(n, offset = 0) {
    const topics = ['the harbour', 'the weather tomorrow', 'the price of bread', 'the road north', 'the old mill', 'the night market'];
    return Array.from({ length: n }, (_, i) => [`Tell me about ${topics[(i + offset) % topics.length]}.`, `Elena shrugs and wipes a mug (${i + offset}).`]);
}

/**
 * Start the sidecar, the stand-in and Chromium, and open the main page.
 * @param {{sidecarSettings?: Record<string, any>, pageSettings?: Record<string, any>}} [options]
 */
export async function startStack({ sidecarSettings = {}, pageSettings = {} } = {}) {
    fs.mkdirSync(SCREENSHOTS, { recursive: true });
    let sidecar, st, browser, page;
    const errors = [];
    let seenErrors = 0;
    async function close() {
        await browser?.close();
        await st?.close();
        await sidecar?.stop();
        if (sidecar?.dataDir) fs.rmSync(sidecar.dataDir, { recursive: true, force: true });
    }
    try {
        // The page's origin must be allowed by the sidecar's CORS: pick the page's port first.
        const hostPort = await freePort();
        const origin = `http://127.0.0.1:${hostPort}`;
        sidecar = await startSidecar({ origins: [origin], settings: sidecarSettings });
        st = await startStHost({ sidecarUrl: sidecar.url, port: hostPort });
        assert.equal(st.origin, origin);
        browser = await launchBrowser();
        // Page-side waits (waitForFunction, waitForSelector, clicks) share the same deadline.
        browser.context.setDefaultTimeout(LOADED_MS);
        page = await newPage();
    } catch (error) {
        await close().catch(() => {});
        throw error;
    }
    /** Call the sidecar directly (from Node, not the page). */
    async function api(method, urlPath, body) {
        const res = await fetch(`${sidecar.url}${urlPath}`, {
            method, headers: body ? { 'Content-Type': 'application/json' } : {}, body: body ? JSON.stringify(body) : undefined,
        });
        return { status: res.status, data: await res.json() };
    }

    /** A new page booted like ST with the extension, connected; `settings` are the extension's own. */
    async function newPage({ settings = {}, extensions } = {}) {
        const page = await browser.context.newPage();
        page.on('console', m => { if (m.type() === 'error') errors.push(m.text()); });
        page.on('pageerror', e => errors.push(`pageerror: ${e.message}`));
        await page.goto(`${st.origin}/`);
        await page.waitForFunction(() => window.stHostBoot);
        await page.evaluate(({ url, settings, extensions }) => window.stHostBoot({
            ...(extensions ? { extensions } : {}),
            settings: { stbme: { sidecarUrl: url, ...settings } },
        }), { url: sidecar.url, settings: { ...PAGE_SETTINGS, ...pageSettings, ...settings }, extensions });
        await page.waitForFunction(() => ['ok', 'proxy'].includes(window.stbme?.debug.connection));
        return page;
    }

    /** Helpers bound to one page. */
    function on(page) {
        const self = {
            page,
            /** The user sends `text` (ST's Generate), resolves with the stand-in's record of the generation. */
            send: text => page.evaluate(t => window.stHost.Generate('normal', { text: t }), text),

            /**
             * Open `chatId` of the first character in this page, with `messages` as its stored history (a fresh
             * chat with the greeting when omitted); `overrides` are its per-chat sidecar settings, set before
             * the page opens it so the extension reads them. Resolves once the sidecar has processed it.
             */
            async openChat(chatId, messages, { overrides } = {}) {
                if (overrides) {
                    const res = await api('PUT', `/v1/chats/${enc(chatId)}/settings`, { settings: overrides });
                    assert.equal(res.status, 200, JSON.stringify(res.data));
                }
                await page.evaluate(async ([id, history]) => {
                    const host = window.stHost;
                    if (history) host.chatFiles[id] = history;
                    const c = window.SillyTavern.getContext();
                    if (c.groupId || c.characterId !== 0) await host.selectCharacter(0);
                    if (host.getCurrentChatId() !== id) await host.openCharacterChat(id);
                }, [chatId, messages ?? null]);
                await self.settled(chatId);
            },

            /** Wait until the sidecar has the chat as the page shows it, processed and embedded. */
            async settled(chatId) {
                const { length, current } = await page.evaluate(() => ({ length: window.stHost.chat.length, current: window.stHost.getCurrentChatId() }));
                assert.equal(current, chatId, 'settled() waits for the chat the page shows');
                await waitFor(async () => {
                    const { data } = await api('GET', `/v1/chats/${enc(chatId)}/status`);
                    return data.messages === length && data.processed_upto === length - 1 && !data.jobs?.pending && data.unembedded === 0;
                }, { timeoutMs: LOADED_MS, what: `the sidecar to process and embed ${length} messages of ${chatId}` });
            },

            /** Open or close the panel's drawer. */
            async showPanel(open = true) {
                const content = '#stbme_settings > .inline-drawer > .inline-drawer-content';
                if (await page.isVisible(content) !== open) await page.click('#stbme_settings > .inline-drawer > .inline-drawer-toggle');
                await page.waitForSelector(content, { state: open ? 'visible' : 'hidden' });
            },

            /** Show or hide a panel section toggled by a button (Memories used, the memory browser). */
            async showSection(buttonId, sectionId, visible = true) {
                if (visible) await self.showPanel(true);
                if (await page.$eval(`#${sectionId}`, el => !el.hidden) !== visible) await page.click(`#${buttonId}`);
                await page.waitForFunction(([id, v]) => document.getElementById(id).hidden === !v, [sectionId, visible]);
            },
        };
        return self;
    }

    return {
        sidecar, st, browser, page, api, newPage, on, ...on(page),

        /** Memories of a chat as text (label and fields). */
        async memoryTexts(chatId) {
            const { data } = await api('GET', `/v1/chats/${enc(chatId)}/nodes?limit=200`);
            return (data.nodes ?? []).map(n => `${n.label} ${JSON.stringify(n.fields)}`);
        },

        /** Page errors since the last call, without the expected noise of a stopped sidecar. */
        newErrors() {
            const fresh = errors.slice(seenErrors);
            seenErrors = errors.length;
            return fresh.filter(e => !EXPECTED_ERRORS.test(e));
        },

        close,
    };
}
