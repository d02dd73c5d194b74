/**
 * LLM relay (llm.mode = relay): the sidecar sends `relay_request` over the live channel, the extension
 * runs it on the user's current SillyTavern connection with ST's own `generateRaw` and answers with
 * `relay_response` (docs/api.md, "Live channel"). No second API key. Pure logic: ST is passed in.
 *
 * The request's length: `generateRaw(…, responseLength)` writes it into ST's global response length
 * (script.js 1.12.6 `saveResponseLength`: `oai_settings.openai_max_tokens` or `amount_gen`) until it
 * returns, so a chat generation built meanwhile would go out with it. With Chat Completion the length is
 * therefore put on the relayed request alone, in ST's CHAT_COMPLETION_SETTINGS_READY event (openai.js
 * `sendOpenAIRequest` emits it with the request body before sending); only other APIs pass responseLength,
 * and the caller must keep chat generations out while such a request runs (GenerationGate).
 */

/**
 * Split chat messages into ST's `generateRaw` arguments: the system messages become `systemPrompt`,
 * the rest the prompt (a string for one message, else the list of {role, content}).
 * @param {{role: string, content: string}[]} messages
 * @returns {{systemPrompt: string, prompt: string | {role: string, content: string}[]}}
 */
export function toGenerateRawArgs(messages) {
    const list = Array.isArray(messages) ? messages.filter(m => m && typeof m.content === 'string') : [];
    const systemPrompt = list.filter(m => m.role === 'system').map(m => m.content).join('\n\n');
    const rest = list.filter(m => m.role !== 'system').map(m => ({ role: m.role === 'assistant' ? 'assistant' : 'user', content: m.content }));
    return { systemPrompt, prompt: rest.length === 1 ? rest[0].content : rest };
}

/**
 * Whether a chat-completion request body (CHAT_COMPLETION_SETTINGS_READY's `generate_data`) is the one
 * built from our prompt: some message carries the start of our last prompt text.
 * @param {any} generateData
 * @param {string} needle
 */
export function isRequestFor(generateData, needle) {
    if (!needle) return false;
    const messages = generateData?.messages;
    if (typeof messages === 'string') return messages.includes(needle);
    return Array.isArray(messages) && messages.some(m => typeof m?.content === 'string' && m.content.includes(needle));
}

/**
 * The connection a structured answer was tried on: the API, the Chat Completion source and the model ST shows.
 * @param {object} context ST's context
 */
export function connectionKey(context) {
    return [context?.mainApi, context?.chatCompletionSettings?.chat_completion_source, context?.onlineStatus]
        .map(part => String(part ?? '')).join('|');
}

/**
 * Whether a structured answer from `generateRaw(…, jsonSchema)` holds JSON. ST reads the connection's
 * answer as JSON and, when it cannot (a provider that ignored the schema and wrote prose or a fenced block),
 * returns '{}' (script.js `extractJsonFromData`); every memory task's schema requires at least one key.
 * @param {unknown} text
 */
export function holdsStructuredAnswer(text) {
    if (typeof text !== 'string') return false;
    try {
        const value = JSON.parse(text);
        return value !== null && typeof value === 'object' && Object.keys(value).length > 0;
    } catch {
        return false;
    }
}

/**
 * Run one relayed request with `generateRaw` from `SillyTavern.getContext()`. Handles ST's object
 * signature (1.13+: `generateRaw({prompt, systemPrompt, responseLength, jsonSchema})`) and the older
 * positional one.
 * @param {object} request `{id, task, messages, max_tokens, schema?}` from the sidecar
 * @param {() => object} getContext returns ST's context (`SillyTavern.getContext`)
 * @param {object} [options]
 * @param {'request'|'argument'|'none'} [options.length] how the request gets `max_tokens`:
 *   'request' sets it on this request's body in CHAT_COMPLETION_SETTINGS_READY (Chat Completion; ST's
 *   settings untouched), 'argument' passes generateRaw's responseLength (ST's global changes meanwhile),
 *   'none' leaves ST's length
 * @param {boolean} [options.structured] the connection is Chat Completion, where ST asks for the request's
 *   `schema` (response_format, or Claude's forced tool) and reads the answer back; on other APIs ST returns
 *   '{}' for any answer to a schema, so it is never sent there
 * @param {Set<string>} [options.schemaRefused] connections (connectionKey) asked for plain text: a connection
 *   that rejects a schema, or answers it without JSON, is added to it
 * @returns {Promise<object>} the `relay_response` to send back
 */
export async function runRelayRequest(request, getContext, { length = 'argument', structured = false, schemaRefused = new Set() } = {}) {
    const id = request?.id;
    let hook = { applied: false, remove: () => {} };
    try {
        const context = getContext();
        const generateRaw = context?.generateRaw;
        if (typeof generateRaw !== 'function') throw new Error('this SillyTavern has no generateRaw; update SillyTavern or set llm.mode to openai');
        const { systemPrompt, prompt } = toGenerateRawArgs(request.messages);
        const maxTokens = Number.isInteger(request.max_tokens) && request.max_tokens > 0 ? request.max_tokens : undefined;
        let responseLength;
        if (maxTokens && length === 'argument') responseLength = maxTokens;
        if (maxTokens && length === 'request') hook = hookRequestLength(context, prompt, maxTokens);
        const objectSignature = generateRaw.length <= 1;
        const connection = connectionKey(context);
        const schema = request.schema;
        const jsonSchema = objectSignature && structured && schema && typeof schema === 'object' && !Array.isArray(schema)
            && !schemaRefused.has(connection)
            ? { name: `stbme_${String(request.task ?? 'answer').replace(/\W/g, '_')}`, value: schema, strict: false }
            : null;
        let text;
        if (objectSignature) {
            const plain = () => generateRaw({ prompt, systemPrompt, responseLength });
            let structuredText = null;
            let refusal = 'gave no JSON for';
            if (jsonSchema) {
                try {
                    structuredText = await generateRaw({ prompt, systemPrompt, responseLength, jsonSchema });
                } catch (error) {
                    if (error?.name === 'AbortError') throw error;   // stopped by the user: no second request
                    refusal = `failed (${String(error?.message ?? error).slice(0, 120)}) on`;
                }
            }
            if (holdsStructuredAnswer(structuredText)) {
                text = structuredText;
            } else {
                // No schema, or the connection could not answer one (an error, or an answer ST could not read as
                // JSON and handed back as '{}'): plain text, which the sidecar reads tolerantly. A connection
                // that answers as plain text is asked that way from now on.
                text = await plain();
                if (jsonSchema) {
                    schemaRefused.add(connection);
                    console.warn(`ST-BME: the current connection (${connection}) ${refusal} a structured request; memory tasks ask it for plain text from now on`);
                }
            }
        } else {
            const flat = typeof prompt === 'string' ? prompt : prompt.map(m => m.content).join('\n\n');
            text = await generateRaw(flat, null, false, false, systemPrompt, responseLength);
        }
        if (length === 'request' && maxTokens && !hook.applied) {
            console.warn(`ST-BME: the relayed request went out with SillyTavern's own response length, not ${maxTokens} (its request body was not recognised)`);
        }
        if (typeof text !== 'string' || !text.trim()) throw new Error('the current SillyTavern connection returned an empty answer');
        return { type: 'relay_response', id, text };
    } catch (error) {
        return { type: 'relay_response', id, error: String(error?.message ?? error) };
    } finally {
        hook.remove();
    }
}

/**
 * Give our own chat-completion request `maxTokens`, leaving ST's setting alone.
 * @returns {{applied: boolean, remove: () => void}} `applied` turns true once our request got the length
 */
function hookRequestLength(context, prompt, maxTokens) {
    const hook = { applied: false, remove: () => {} };
    const events = context.eventSource;
    const ready = (context.eventTypes ?? context.event_types)?.CHAT_COMPLETION_SETTINGS_READY;
    if (!events || !ready) return hook;
    const last = typeof prompt === 'string' ? prompt : prompt.at(-1)?.content ?? '';
    // ST trims the prompt and substitutes macros; the first words of our text are enough to know it.
    const needle = String(last).trim().slice(0, 160);
    const listener = data => {
        if (!isRequestFor(data, needle)) return;
        if (Object.hasOwn(data, 'max_completion_tokens')) data.max_completion_tokens = maxTokens; // o1 models (openai.js)
        else data.max_tokens = maxTokens;
        hook.applied = true;
    };
    events.on(ready, listener);
    hook.remove = () => events.removeListener(ready, listener);
    return hook;
}
