// HTTP client for the sidecar API (docs/api.md), direct or through the ST server plugin that proxies
// /api/plugins/stbme/* to the sidecar. Pure module: no SillyTavern imports; `fetch` is injected.

export const PROXY_BASE = '/api/plugins/stbme';
/** Header the proxy plugin turns into `Authorization: Bearer` upstream. ST may itself use Basic auth, so
 * the browser must not send its own Authorization header to ST. */
export const PROXY_TOKEN_HEADER = 'X-Stbme-Token';
export const NODE_ACTIONS = Object.freeze(['pin', 'unpin', 'lock', 'unlock', 'archive', 'restore']);

export class ApiError extends Error {
    /**
     * @param {string} message
     * @param {{status?: number, field?: string|null, body?: any, network?: boolean, route?: string}} [details]
     */
    constructor(message, { status = 0, field = null, body = null, network = false, route = '' } = {}) {
        super(message);
        this.name = 'ApiError';
        this.status = status;
        this.field = field;
        this.body = body;
        this.network = network;
        this.route = route;
    }
}

const enc = encodeURIComponent;

/**
 * Query string from an object, skipping null/undefined/'' values.
 * @param {Record<string, any>} [query]
 */
export function queryString(query) {
    if (!query) return '';
    const parts = Object.entries(query)
        .filter(([, v]) => v !== undefined && v !== null && v !== '')
        .map(([k, v]) => `${enc(k)}=${enc(String(v))}`);
    return parts.length ? `?${parts.join('&')}` : '';
}

/**
 * Combine an optional caller signal with a timeout into one signal.
 * @param {AbortSignal|undefined} signal
 * @param {number} timeoutMs 0 for none
 */
function combinedSignal(signal, timeoutMs) {
    if (!timeoutMs) return { signal, done: () => {} };
    const controller = new AbortController();
    const timer = setTimeout(() => controller.abort(new Error(`timed out after ${timeoutMs} ms`)), timeoutMs);
    const onAbort = () => controller.abort(signal.reason);
    if (signal) {
        if (signal.aborted) controller.abort(signal.reason);
        else signal.addEventListener('abort', onAbort, { once: true });
    }
    return {
        signal: controller.signal,
        done: () => {
            clearTimeout(timer);
            signal?.removeEventListener('abort', onAbort);
        },
    };
}

/** The `field` of the sidecar's refusal of a direct browser request when ST has user accounts. */
const ACCOUNT_FIELD = 'X-STBME-Account';

export class SidecarClient {
    /**
     * @param {object} options
     * @param {string} options.baseUrl sidecar URL for direct calls, e.g. http://127.0.0.1:8765
     * @param {'auto'|'direct'|'proxy'} [options.mode]
     * @param {string} [options.token] API token (sidecar bound to a LAN address)
     * @param {string} [options.proxyBase] where ST mounts the plugin
     * @param {typeof fetch} [options.fetch]
     * @param {() => Record<string, string>} [options.proxyHeaders] ST's `getRequestHeaders()` (CSRF token)
     * @param {number} [options.timeoutMs] default deadline per request (0: none)
     */
    constructor({ baseUrl, mode = 'auto', token = '', proxyBase = PROXY_BASE, fetch: fetchImpl, proxyHeaders, timeoutMs = 0 }) {
        this.baseUrl = String(baseUrl || '').replace(/\/+$/, '');
        this.mode = mode;
        this.token = token;
        this.proxyBase = proxyBase.replace(/\/+$/, '');
        this.fetch = fetchImpl ?? ((...args) => globalThis.fetch(...args));
        this.proxyHeaders = proxyHeaders ?? (() => ({}));
        this.timeoutMs = timeoutMs;
        /** Route that answered last ('direct' | 'proxy'); in auto mode it is tried first. */
        this.route = mode === 'proxy' ? 'proxy' : 'direct';
    }

    /** Routes to try, in order. */
    routes() {
        if (this.mode === 'direct') return ['direct'];
        if (this.mode === 'proxy') return ['proxy'];
        return this.route === 'proxy' ? ['proxy', 'direct'] : ['direct', 'proxy'];
    }

    /**
     * URL and headers of a call on one route.
     * @param {'direct'|'proxy'} route
     * @param {string} path API path starting with '/'
     * @param {boolean} hasBody
     */
    target(route, path, hasBody) {
        if (route === 'proxy') {
            const headers = { ...this.proxyHeaders() };
            if (this.token) headers[PROXY_TOKEN_HEADER] = this.token;
            if (hasBody) headers['Content-Type'] = 'application/json';
            else delete headers['Content-Type'];
            return { url: `${this.proxyBase}${path}`, headers };
        }
        const headers = {};
        if (this.token) headers.Authorization = `Bearer ${this.token}`;
        if (hasBody) headers['Content-Type'] = 'application/json';
        return { url: `${this.baseUrl}${path}`, headers };
    }

    /**
     * Call the API. Network failures (refused, CORS, DNS) on the first route fall through to the next
     * one in auto mode; HTTP errors do not (the sidecar answered).
     * @param {string} method
     * @param {string} path
     * @param {{body?: any, query?: object, signal?: AbortSignal, timeoutMs?: number}} [options]
     * @returns {Promise<any>} parsed JSON
     */
    async request(method, path, { body, query, signal, timeoutMs } = {}) {
        const fullPath = path + queryString(query);
        const hasBody = body !== undefined;
        let lastError = null;
        for (const route of this.routes()) {
            const { url, headers } = this.target(route, fullPath, hasBody);
            const combined = combinedSignal(signal, timeoutMs ?? this.timeoutMs);
            let response;
            try {
                response = await this.fetch(url, {
                    method,
                    headers,
                    body: hasBody ? JSON.stringify(body) : undefined,
                    signal: combined.signal,
                });
            } catch (error) {
                combined.done();
                if (combined.signal?.aborted || signal?.aborted) throw error;
                lastError = new ApiError(`cannot reach the sidecar (${route}): ${error?.message ?? error}`, { network: true, route });
                continue;
            }
            let data = null;
            try {
                const text = await response.text();
                data = text ? JSON.parse(text) : null;
            } catch {
                data = null;
            } finally {
                combined.done();
            }
            // ST answers 404 (HTML) for a missing plugin, and the plugin answers 502 {proxy: true} when it
            // cannot reach the sidecar: both mean "this route does not lead to the sidecar".
            if (route === 'proxy' && (data === null || data.proxy === true) && (response.status === 404 || response.status === 502)) {
                lastError = new ApiError(data?.error || (response.status === 404
                    ? 'the ST-BME proxy plugin is not installed or enabled'
                    : 'the ST-BME proxy plugin cannot reach the sidecar'), { status: response.status, network: true, route });
                continue;
            }
            // SillyTavern runs with user accounts: the sidecar answers a browser only through the plugin,
            // which names the account (docs/security.md). In auto mode that is the route to take.
            if (route === 'direct' && this.mode === 'auto' && response.status === 403 && data?.field === ACCOUNT_FIELD) {
                lastError = new ApiError(data.error, { status: 403, field: ACCOUNT_FIELD, body: data, route });
                continue;
            }
            this.route = route;
            if (!response.ok || (data && data.ok === false)) {
                const message = data?.error || `HTTP ${response.status}`;
                throw new ApiError(message, { status: data?.status ?? response.status, field: data?.field ?? null, body: data, route });
            }
            if (data === null) throw new ApiError(`the sidecar sent no JSON (HTTP ${response.status})`, { status: response.status, route });
            return data;
        }
        throw lastError ?? new ApiError('no route to the sidecar', { network: true });
    }

    get(path, options) { return this.request('GET', path, options); }
    post(path, body, options) { return this.request('POST', path, { ...options, body: body ?? {} }); }

    /** GET /health */
    health(options) { return this.get('/health', options); }

    /** GET /v1/settings/schema -> settings (list) */
    schema(options) { return this.get('/v1/settings/schema', options); }
    getSettings(options) { return this.get('/v1/settings', options); }
    putSettings(settings, options) { return this.request('PUT', '/v1/settings', { ...options, body: { settings } }); }
    getChatSettings(chatId, options) { return this.get(`/v1/chats/${enc(chatId)}/settings`, options); }
    putChatSettings(chatId, settings, options) {
        return this.request('PUT', `/v1/chats/${enc(chatId)}/settings`, { ...options, body: { settings } });
    }

    sync(chatId, body, options) { return this.post(`/v1/chats/${enc(chatId)}/sync`, body, options); }
    recall(chatId, body, options) { return this.post(`/v1/chats/${enc(chatId)}/recall`, body, options); }
    status(chatId, options) { return this.get(`/v1/chats/${enc(chatId)}/status`, options); }
    /** Process every stored message of the chat now: `{queued, progress}`. */
    process(chatId, options) { return this.post(`/v1/chats/${enc(chatId)}/process`, {}, options); }
    listChats(options) { return this.get('/v1/chats', options); }
    deleteChat(chatId, options) { return this.request('DELETE', `/v1/chats/${enc(chatId)}`, options); }

    /**
     * GET /v1/chats/{id}/nodes
     * @param {string} chatId
     * @param {{offset?: number, limit?: number, type?: string, q?: string, archived?: boolean}} [filter]
     */
    nodes(chatId, filter = {}, options) {
        return this.get(`/v1/chats/${enc(chatId)}/nodes`, { ...options, query: filter });
    }
    /** GET /v1/memory-types: every memory type and its fields. */
    memoryTypes(options) { return this.get('/v1/memory-types', options); }
    /** Which messages first..last have memories: `{processed_upto, messages: [{index, memories}]}`. */
    rememberedMessages(chatId, first, last, options) {
        return this.get(`/v1/chats/${enc(chatId)}/messages/memories`, { ...options, query: { from: first, to: last } });
    }
    /** The memories behind one message: `{index, memories: [node, ...]}`. */
    messageMemories(chatId, index, options) { return this.get(`/v1/chats/${enc(chatId)}/messages/${index}/memories`, options); }
    getNode(chatId, id, options) { return this.get(`/v1/chats/${enc(chatId)}/nodes/${enc(id)}`, options); }
    createNode(chatId, body, options) { return this.post(`/v1/chats/${enc(chatId)}/nodes`, body, options); }
    patchNode(chatId, id, body, options) {
        return this.request('PATCH', `/v1/chats/${enc(chatId)}/nodes/${enc(id)}`, { ...options, body });
    }
    nodeAction(chatId, id, action, options) {
        if (!NODE_ACTIONS.includes(action)) throw new ApiError(`unknown node action ${action}`);
        return this.post(`/v1/chats/${enc(chatId)}/nodes/${enc(id)}/${action}`, {}, options);
    }
    edges(chatId, nodeId, options) { return this.get(`/v1/chats/${enc(chatId)}/edges`, { ...options, query: { node: nodeId } }); }
    exportChat(chatId, options) { return this.get(`/v1/chats/${enc(chatId)}/export`, options); }
    importChat(chatId, data, mode = 'merge', options) {
        return this.request('POST', `/v1/chats/${enc(chatId)}/import`, { ...options, query: { mode }, body: data });
    }
    reindex(chatId, options) { return this.post(`/v1/chats/${enc(chatId)}/reindex`, {}, options); }

    /** WebSocket URL of the live channel (direct route only; ST's plugin router cannot upgrade). */
    wsUrl() {
        const url = this.baseUrl.replace(/^http/i, 'ws') + '/v1/ws';
        return this.token ? `${url}?token=${enc(this.token)}` : url;
    }
}
