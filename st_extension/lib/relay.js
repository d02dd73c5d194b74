/**
 * LLM relay (llm.mode = relay): the sidecar sends `relay_request` over the live WebSocket, the extension
 * runs it on the user's current SillyTavern connection with ST's own `generateRaw` and answers with
 * `relay_response` (docs/api.md, "Live channel"). No second API key. Pure logic: ST is passed in.
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
 * Run one relayed request with `generateRaw` from `SillyTavern.getContext()`. Handles ST's object
 * signature (1.13+: `generateRaw({prompt, systemPrompt, responseLength})`) and the older positional one.
 * @param {object} request `{id, task, messages, max_tokens}` from the sidecar
 * @param {() => object} getContext returns ST's context (`SillyTavern.getContext`)
 * @returns {Promise<object>} the `relay_response` to send back
 */
export async function runRelayRequest(request, getContext) {
    const id = request?.id;
    try {
        const generateRaw = getContext()?.generateRaw;
        if (typeof generateRaw !== 'function') throw new Error('this SillyTavern has no generateRaw; update SillyTavern or set llm.mode to openai');
        const { systemPrompt, prompt } = toGenerateRawArgs(request.messages);
        const responseLength = Number.isInteger(request.max_tokens) && request.max_tokens > 0 ? request.max_tokens : undefined;
        let text;
        if (generateRaw.length <= 1) {
            text = await generateRaw({ prompt, systemPrompt, responseLength });
        } else {
            const flat = typeof prompt === 'string' ? prompt : prompt.map(m => m.content).join('\n\n');
            text = await generateRaw(flat, null, false, false, systemPrompt, responseLength);
        }
        if (typeof text !== 'string' || !text.trim()) throw new Error('the current SillyTavern connection returned an empty answer');
        return { type: 'relay_response', id, text };
    } catch (error) {
        return { type: 'relay_response', id, error: String(error?.message ?? error) };
    }
}
