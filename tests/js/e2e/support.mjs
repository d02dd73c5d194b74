// Helpers for the browser end-to-end test: the real sidecar as a subprocess, a static server for the ST
// stand-in page (with the real server plugin mounted as ST mounts it), and headless Chromium.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import express from 'express';
import { waitFor } from '../support/wait.mjs';

export { waitFor };

/**
 * The deadline of every wait in the e2e tests. Beside three numpy matmul loops and three `yes` (load about
 * 10 on 2 cores) the suite runs about 8 times slower than idle; a step that takes 10 s idle must still fit.
 */
export const LOADED_MS = 120000;
/** A sidecar's start (Python, the bundled model) took more than 60 s at load 28 on 2 cores. */
export const STARTUP_MS = 240000;

const here = path.dirname(fileURLToPath(import.meta.url));
export const REPO = path.resolve(here, '../../..');
export const EXTENSION_DIR = path.join(REPO, 'st_extension');
export const HOST_DIR = path.join(here, 'host');
export const SCREENSHOTS = path.join(here, 'screenshots');
const FONT_AWESOME = path.join(here, '..', 'node_modules', '@fortawesome', 'fontawesome-free');
/** ST serves a third-party extension from here (extensions.js addExtensionScript). */
export const EXTENSION_URL_PATH = '/scripts/extensions/third-party/st-bme-sidecar';
export const REPO_LAYOUT_URL_PATH = '/scripts/extensions/third-party/st-bme-sidecar-repo';

/** A free TCP port on 127.0.0.1. */
export function freePort() {
    return new Promise((resolve, reject) => {
        const srv = net.createServer();
        srv.unref();
        srv.on('error', reject);
        srv.listen(0, '127.0.0.1', () => {
            const { port } = srv.address();
            srv.close(() => resolve(port));
        });
    });
}

/** STBME_PYTHON, else the repo's .venv, else python3. */
export function findPython() {
    if (process.env.STBME_PYTHON) return process.env.STBME_PYTHON;
    const venv = path.join(REPO, '.venv', 'bin', 'python');
    return fs.existsSync(venv) ? venv : 'python3';
}

/**
 * Start `stbme serve` on a free port with a fresh data dir; resolves once GET /health says ok.
 * @param {{origins: string[], settings?: Record<string, any>, dataDir?: string, port?: number}} options
 */
export async function startSidecar({ origins, settings = {}, dataDir, port } = {}) {
    port = port ?? await freePort();
    dataDir = dataDir ?? fs.mkdtempSync(path.join(os.tmpdir(), 'stbme-e2e-'));
    const args = ['-m', 'stbme', 'serve', '--host', '127.0.0.1', '--port', String(port), '--data-dir', dataDir,
        '--setting', 'server.cors_origins', JSON.stringify(origins)];
    for (const [name, value] of Object.entries(settings)) args.push('--setting', name, JSON.stringify(value));
    const python = findPython();
    const child = spawn(python, args, { cwd: REPO, env: { ...process.env, PYTHONUNBUFFERED: '1' }, stdio: ['ignore', 'pipe', 'pipe'] });
    const log = [];
    child.stdout.on('data', d => log.push(String(d)));
    child.stderr.on('data', d => log.push(String(d)));
    let exited = null;
    child.on('exit', code => { exited = code; });
    const url = `http://127.0.0.1:${port}`;
    try {
        await waitFor(async () => {
            if (exited !== null) throw new Error(`sidecar exited with ${exited}:\n${log.join('').slice(-3000)}`);
            const res = await fetch(`${url}/health`);
            const data = await res.json();
            return data.ok === true;
        }, { timeoutMs: STARTUP_MS, intervalMs: 300, what: `the sidecar at ${url}` });
    } catch (error) {
        child.kill('SIGKILL');
        if (exited !== null || /exited/.test(error.message)) throw error;
        throw new Error(`${error.message}\n${log.join('').slice(-3000)}`);
    }
    return {
        url, port, dataDir, child, log,
        async stop() {
            if (child.exitCode !== null || exited !== null) return;
            const done = new Promise(r => child.once('exit', r));
            child.kill('SIGTERM');
            const timer = setTimeout(() => child.kill('SIGKILL'), 10000);
            await done;
            clearTimeout(timer);
        },
    };
}

/**
 * Serve the ST stand-in page and the extension like ST does, with the real server plugin mounted at
 * /api/plugins/stbme via its init(router) (src/plugin-loader.js).
 * @param {{sidecarUrl: string, port?: number}} options
 */
export async function startStHost({ sidecarUrl, port = 0 }) {
    const app = express();
    const noCache = { etag: false, lastModified: false, setHeaders: res => res.set('Cache-Control', 'no-store') };
    app.get('/', (req, res) => res.sendFile(path.join(HOST_DIR, 'index.html')));
    app.get('/script.js', (req, res) => res.type('text/javascript').sendFile(path.join(HOST_DIR, 'script.js')));
    app.use('/host', express.static(HOST_DIR, noCache));
    // ST serves Font Awesome Free 6.5.2 from public/css and public/webfonts (index.html:23-24).
    app.use('/css', express.static(path.join(FONT_AWESOME, 'css')));
    app.use('/webfonts', express.static(path.join(FONT_AWESOME, 'webfonts')));
    app.use(EXTENSION_URL_PATH, express.static(EXTENSION_DIR, noCache));
    // The layout of "Install extension" from the repository URL: ST clones the whole repository, so its
    // manifest.json sits at the root and points into st_extension/ (see fixtures/repo-root-manifest.json).
    app.get(`${REPO_LAYOUT_URL_PATH}/manifest.json`, (req, res) => res.sendFile(path.join(here, 'fixtures', 'repo-root-manifest.json')));
    app.use(`${REPO_LAYOUT_URL_PATH}/st_extension`, express.static(EXTENSION_DIR, noCache));
    const previous = process.env.STBME_SIDECAR_URL;
    process.env.STBME_SIDECAR_URL = sidecarUrl;
    const plugin = await import(path.join(EXTENSION_DIR, 'server-plugin', 'index.cjs'));
    const router = express.Router();
    await (plugin.init || plugin.default.init)(router);
    if (previous === undefined) delete process.env.STBME_SIDECAR_URL;
    else process.env.STBME_SIDECAR_URL = previous;
    const proxied = [];
    app.use('/api/plugins/stbme', (req, res, next) => { proxied.push(`${req.method} ${req.url}`); next(); }, router);
    const server = await new Promise(resolve => {
        const s = app.listen(port, '127.0.0.1', () => resolve(s));
    });
    const origin = `http://127.0.0.1:${server.address().port}`;
    return { origin, server, proxied, close: () => new Promise(r => server.close(r)) };
}

/** Headless Debian Chromium through playwright-core, with a fresh profile. */
export async function launchBrowser() {
    const { chromium } = await import('playwright-core');
    const userDataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'stbme-chromium-'));
    const executablePath = process.env.CHROMIUM_PATH || '/usr/bin/chromium';
    const context = await chromium.launchPersistentContext(userDataDir, {
        executablePath,
        headless: true,
        timeout: STARTUP_MS,
        viewport: { width: 520, height: 900 },
        args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
            '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    });
    return {
        context,
        async close() {
            await context.close();
            fs.rmSync(userDataDir, { recursive: true, force: true });
        },
    };
}
