// A stand-in for the parts of SillyTavern (ST) that the ST-BME extension touches, written for the tests
// (no ST code copied). Names, signatures, values and event order follow ST's source; citations are to
// SillyTavern/SillyTavern at staging 1ac6780e9c7f (1.12.6, 2024-10-18) unless marked "newer ST":
//   script.js       = public/script.js
//   extensions.js   = public/scripts/extensions.js
//   eventemitter.js = public/lib/eventemitter.js
//   popup.js        = public/scripts/popup.js
//   slash-commands/ = public/scripts/slash-commands/
// "Newer ST" (1.13+, public/scripts/st-context.js) passes the generation type to interceptors
// (`runGenerationInterceptors(chat, contextSize, type)` calling `interceptor(chat, contextSize, abort, type)`)
// and runs them for quiet generations too; this stand-in follows the newer behaviour, which is a superset.

// ---------------------------------------------------------------- events (script.js:414-476)
export const event_types = {
    APP_READY: 'app_ready',
    MESSAGE_SWIPED: 'message_swiped',
    MESSAGE_SENT: 'message_sent',
    MESSAGE_RECEIVED: 'message_received',
    MESSAGE_EDITED: 'message_edited',
    MESSAGE_DELETED: 'message_deleted',
    MESSAGE_UPDATED: 'message_updated',
    CHAT_CHANGED: 'chat_id_changed',
    GENERATION_AFTER_COMMANDS: 'GENERATION_AFTER_COMMANDS',
    GENERATION_STARTED: 'generation_started',
    GENERATION_STOPPED: 'generation_stopped',
    GENERATION_ENDED: 'generation_ended',
    GENERATE_AFTER_DATA: 'generate_after_data',
    CHAT_COMPLETION_SETTINGS_READY: 'chat_completion_settings_ready',
    EXTENSION_SETTINGS_LOADED: 'extension_settings_loaded',
    SETTINGS_LOADED: 'settings_loaded',
    USER_MESSAGE_RENDERED: 'user_message_rendered',
    CHARACTER_MESSAGE_RENDERED: 'character_message_rendered',
    CHAT_DELETED: 'chat_deleted',
    CHAT_CREATED: 'chat_created',
    GROUP_CHAT_DELETED: 'group_chat_deleted',
    GROUP_CHAT_CREATED: 'group_chat_created',
};

/** eventemitter.js:27-118: `emit` awaits each listener in turn and logs (does not rethrow) errors. */
class EventEmitter {
    constructor() { this.events = {}; }
    on(event, listener) {
        if (event === undefined) return; // eventemitter.js:31-35
        (this.events[event] ??= []).push(listener);
    }
    makeFirst(event, listener) {
        const list = (this.events[event] ??= []);
        const i = list.indexOf(listener);
        if (i > -1) list.splice(i, 1);
        list.unshift(listener);
    }
    makeLast(event, listener) {
        const list = (this.events[event] ??= []);
        const i = list.indexOf(listener);
        if (i > -1) list.splice(i, 1);
        list.push(listener);
    }
    removeListener(event, listener) {
        const list = this.events[event];
        if (!list) return;
        const i = list.indexOf(listener);
        if (i > -1) list.splice(i, 1);
    }
    async emit(event, ...args) {
        host.emitted.push({ event, args, at: performance.now() });
        const listeners = (this.events[event] ?? []).slice();
        for (const listener of listeners) {
            const started = performance.now();
            try {
                await listener.apply(this, args);
            } catch (err) {
                console.error(err);
            }
            host.listenerTimes.push({ event, ms: performance.now() - started });
        }
    }
}

export const eventSource = new EventEmitter();

// ---------------------------------------------------------------- extension prompts
/** script.js:588-596 */
export const extension_prompt_types = { NONE: -1, IN_PROMPT: 0, IN_CHAT: 1, BEFORE_PROMPT: 2 };
/** script.js:598-606 */
export const extension_prompt_roles = { SYSTEM: 0, USER: 1, ASSISTANT: 2 };
/** script.js:608 */
export const MAX_INJECTION_DEPTH = 1000;
export const extension_prompts = {};

/** script.js:7400-7408 */
export function setExtensionPrompt(key, value, position, depth, scan = false, role = extension_prompt_roles.SYSTEM) {
    extension_prompts[key] = {
        value: String(value),
        position: Number(position),
        depth: Number(depth),
        scan: !!scan,
        role: Number(role ?? extension_prompt_roles.SYSTEM),
    };
}

/** script.js:2848-2867 (substituteParams is the identity here: no macros in the tests) */
export function getExtensionPrompt(position = extension_prompt_types.IN_PROMPT, depth = undefined, separator = '\n', role = undefined, wrap = true) {
    let prompt = Object.keys(extension_prompts)
        .sort()
        .map(x => extension_prompts[x])
        .filter(x => x.position == position && x.value)
        .filter(x => depth === undefined || x.depth === undefined || x.depth === depth)
        .filter(x => role === undefined || x.role === undefined || x.role === role)
        .map(x => x.value.trim())
        .join(separator);
    if (wrap && prompt.length && !prompt.startsWith(separator)) prompt = separator + prompt;
    if (wrap && prompt.length && !prompt.endsWith(separator)) prompt = prompt + separator;
    return prompt;
}

/** script.js:4662-4710: inserts IN_CHAT extension prompts counting depth from the end of the chat. */
function doChatInject(messages, isContinue) {
    const injectedIndices = [];
    let totalInsertedMessages = 0;
    messages.reverse();
    for (let i = 0; i <= MAX_INJECTION_DEPTH; i++) {
        const roles = [extension_prompt_roles.SYSTEM, extension_prompt_roles.USER, extension_prompt_roles.ASSISTANT];
        const names = { [extension_prompt_roles.SYSTEM]: '', [extension_prompt_roles.USER]: name1, [extension_prompt_roles.ASSISTANT]: name2 };
        const roleMessages = [];
        for (const role of roles) {
            const extensionPrompt = String(getExtensionPrompt(extension_prompt_types.IN_CHAT, i, '\n', role, false)).trimStart();
            if (extensionPrompt) {
                roleMessages.push({
                    name: names[role],
                    is_user: role === extension_prompt_roles.USER,
                    mes: extensionPrompt,
                    extra: { type: role === extension_prompt_roles.SYSTEM ? 'narrator' : null },
                    injected: true,
                    injectedRole: role,
                });
            }
        }
        if (roleMessages.length) {
            const depth = isContinue && i === 0 ? 1 : i;
            const injectIdx = depth + totalInsertedMessages;
            messages.splice(injectIdx, 0, ...roleMessages);
            totalInsertedMessages += roleMessages.length;
            injectedIndices.push(...roleMessages.map((_, k) => injectIdx + k));
        }
    }
    messages.reverse();
    return injectedIndices;
}

// ---------------------------------------------------------------- chat state (script.js:496-520, 790-797)
export let name1 = 'Alex';
export let name2 = 'Elena';
export const chat = [];
export const characters = [
    { name: 'Elena', avatar: 'elena.png', chat: 'Elena - 2024-10-18@20h00m00s', first_mes: 'Welcome to the Silver Stag, traveller.' },
    { name: 'Marek', avatar: 'marek.png', chat: 'Marek - 2024-10-18@21h00m00s', first_mes: 'Marek nods.' },
];
export const groups = [{ id: 'g1', name: 'Party', members: ['elena.png', 'marek.png'], chat_id: 'Party - group chat 1' }];
export let this_chid = undefined;
export let selected_group = null;
/** Stored chats, by chat id, as ST keeps them on disk. */
const chatFiles = {};

/** script.js:790-797 */
export function getCurrentChatId() {
    if (selected_group) {
        return groups.find(x => x.id == selected_group)?.chat_id;
    } else if (this_chid !== undefined) {
        return characters[this_chid]?.chat;
    }
}

// ---------------------------------------------------------------- generation settings and generateRaw
/** script.js:868 `amount_gen`, `max_context`; openai.js:228-229 `oai_settings` defaults; script.js:8242 `mainApi`. */
export let main_api = 'openai';
export let amount_gen = 80;
export let max_context = 2048;
export const oai_settings = { openai_max_context: 4095, openai_max_tokens: 300 };

/** script.js:4948-4985 `getMaxContextSize`: the prompt budget is the context minus the response length. */
export function getMaxContextSize() {
    if (main_api === 'openai') return oai_settings.openai_max_context - oai_settings.openai_max_tokens;
    return max_context - amount_gen;
}

/** Switch the connection the way ST's API selector does, with a response length (for the tests). */
function setMainApi(api, { responseLength } = {}) {
    main_api = api;
    if (responseLength) {
        if (api === 'openai') oai_settings.openai_max_tokens = responseLength;
        else amount_gen = responseLength;
    }
}

/**
 * The model behind ST's connection. A held backend answers only when the test calls `releaseBackend()`,
 * so a relayed request can be kept in flight.
 */
async function fakeBackend(kind, data) {
    const entry = { kind, data, at: performance.now(), answered: false };
    host.backendRequests.push(entry);
    if (kind === 'raw' && host.holdRaw) await new Promise(resolve => host.heldRaw.push(resolve));
    entry.answered = true;
    return kind === 'raw' ? host.rawReply : '';
}

/** openai.js:1744-1960 `sendOpenAIRequest`: the body from oai_settings, then CHAT_COMPLETION_SETTINGS_READY (awaited). */
async function buildChatCompletionRequest(messages) {
    const generate_data = { messages, max_tokens: oai_settings.openai_max_tokens, stream: false }; // openai.js:1804
    await eventSource.emit(event_types.CHAT_COMPLETION_SETTINGS_READY, generate_data); // openai.js:1956
    return generate_data;
}

/** script.js:4375-4383: the text-completion body reads amount_gen, then GENERATE_AFTER_DATA (awaited). */
async function buildTextCompletionRequest(promptText) {
    const generate_data = { prompt: promptText, max_new_tokens: amount_gen, truncation_length: max_context };
    await eventSource.emit(event_types.GENERATE_AFTER_DATA, generate_data);
    return generate_data;
}

/**
 * script.js:3262-3360 `generateRaw` of ST 1.12.6 (positional; an export of script.js, not on getContext()).
 * With a responseLength it overwrites the global response length (3363-3380 `saveResponseLength`) until it
 * returns (3381-3395 `restoreResponseLength`, in `finally`): a chat generation built meanwhile reads it.
 * The Chat Completion path sends through `sendOpenAIRequest('quiet', …)` (3335), so CHAT_COMPLETION_SETTINGS_READY
 * fires for it too; the text path fetches directly (3337-3350) with no event.
 */
export async function generateRaw(prompt, api, instructOverride, quietToLoud, systemPrompt, responseLength) {
    if (!api) api = main_api;
    const responseLengthCustomized = typeof responseLength === 'number' && responseLength > 0;
    let originalResponseLength = -1;
    if (systemPrompt) prompt = api === 'openai' ? prompt : `${systemPrompt}\n${prompt}`;
    prompt = `${prompt}\n`;
    try {
        if (responseLengthCustomized) {
            originalResponseLength = api === 'openai' ? oai_settings.openai_max_tokens : amount_gen;
            if (api === 'openai') oai_settings.openai_max_tokens = responseLength;
            else amount_gen = responseLength;
        }
        let generateData;
        if (api === 'openai') {
            const messages = [{ role: 'user', content: prompt.trim() }];
            if (systemPrompt) messages.unshift({ role: 'system', content: systemPrompt.trim() });
            generateData = await buildChatCompletionRequest(messages);
        } else {
            generateData = { prompt, max_new_tokens: amount_gen, truncation_length: max_context };
        }
        const message = await fakeBackend('raw', generateData);
        if (!message) throw new Error('No message generated');
        return message;
    } finally {
        if (responseLengthCustomized) {
            if (api === 'openai') oai_settings.openai_max_tokens = originalResponseLength;
            else amount_gen = originalResponseLength;
        }
    }
}

// ---------------------------------------------------------------- settings (extensions.js, script.js:555)
export const extension_settings = { disabledExtensions: [] };
let saveCount = 0;
export function saveSettingsDebounced() {
    saveCount++;
    try { localStorage.setItem('st_host_extension_settings', JSON.stringify(extension_settings)); } catch { /* private mode */ }
}

/** script.js:898-903 */
const csrfToken = 'test-csrf-token';
export function getRequestHeaders() {
    return { 'Content-Type': 'application/json', 'X-CSRF-Token': csrfToken };
}

/** extensions.js:78-80 -> templates.js renderTemplateAsync: fetches the .html (Handlebars + DOMPurify in ST; no macros in ours). */
export async function renderExtensionTemplateAsync(extensionName, templateId, templateData = {}, sanitize = true, localize = true) {
    const response = await fetch(`/scripts/extensions/${extensionName}/${templateId}.html`);
    if (!response.ok) throw new Error(`template ${extensionName}/${templateId} not found`);
    return response.text();
}

// ---------------------------------------------------------------- popups (popup.js:8-27, 656)
export const POPUP_TYPE = { TEXT: 1, CONFIRM: 2, INPUT: 3, DISPLAY: 4, CROP: 5 };
export const POPUP_RESULT = { AFFIRMATIVE: 1, NEGATIVE: 0, CANCELLED: null };
export async function callGenericPopup(content, type, inputValue = '', popupOptions = {}) {
    const text = typeof content === 'string' ? content : content?.textContent ?? '';
    host.popups.push({ text, type, popupOptions });
    if (type === POPUP_TYPE.CONFIRM) return host.popupAnswer;
    // popup.js:180-206, 330-340, 437: the #popup_template dialog (index.html), content put into .popup-content,
    // shown modal; it resolves when closed (the test closes it with host.closePopup()).
    const dlg = document.createElement('dialog');
    dlg.className = 'popup';
    if (popupOptions.wide) dlg.classList.add('wide_dialogue_popup');
    const body = document.createElement('div');
    body.className = 'popup-body';
    const inner = document.createElement('div');
    inner.className = 'popup-content';
    if (content instanceof Node) inner.append(content);
    else inner.innerHTML = String(content);
    body.append(inner);
    dlg.append(body);
    document.body.append(dlg);
    dlg.showModal();
    return new Promise(resolve => {
        host.closePopup = () => {
            dlg.close();
            dlg.remove();
            host.closePopup = () => {};
            resolve(POPUP_RESULT.AFFIRMATIVE);
        };
    });
}
export class Popup {
    constructor(content, type, inputValue = '', options = {}) { Object.assign(this, { content, type, inputValue, options }); }
    show() { return callGenericPopup(this.content, this.type, this.inputValue, this.options); }
}

// ---------------------------------------------------------------- slash commands (slash-commands/)
/** SlashCommandArgument.js:11-21 */
export const ARGUMENT_TYPE = {
    STRING: 'string', NUMBER: 'number', RANGE: 'range', BOOLEAN: 'bool', VARIABLE_NAME: 'varname',
    CLOSURE: 'closure', SUBCOMMAND: 'subcommand', LIST: 'list', DICTIONARY: 'dictionary',
};
/** SlashCommandArgument.js:23-81 */
export class SlashCommandArgument {
    static fromProps(props) {
        return new SlashCommandArgument(props.description, props.typeList ?? [ARGUMENT_TYPE.STRING], props.isRequired ?? false,
            props.acceptsMultiple ?? false, props.defaultValue ?? null, props.enumList ?? [], props.enumProvider ?? null, props.forceEnum ?? false);
    }
    constructor(description, types, isRequired = false, acceptsMultiple = false, defaultValue = null, enums = [], enumProvider = null, forceEnum = false) {
        this.description = description;
        this.typeList = types ? (Array.isArray(types) ? types : [types]) : [];
        this.isRequired = isRequired ?? false;
        this.acceptsMultiple = acceptsMultiple ?? false;
        this.defaultValue = defaultValue;
        this.enumList = enums ? (Array.isArray(enums) ? enums : [enums]) : [];
        this.enumProvider = enumProvider;
        this.forceEnum = forceEnum;
    }
}
/** SlashCommandArgument.js:83-140 */
export class SlashCommandNamedArgument extends SlashCommandArgument {
    static fromProps(props) {
        return new SlashCommandNamedArgument(props.name, props.description, props.typeList ?? [ARGUMENT_TYPE.STRING], props.isRequired ?? false,
            props.acceptsMultiple ?? false, props.defaultValue ?? null, props.enumList ?? [], props.aliasList ?? [], props.enumProvider ?? null, props.forceEnum ?? false);
    }
    constructor(name, description, types, isRequired = false, acceptsMultiple = false, defaultValue = null, enums = [], aliases = [], enumProvider = null, forceEnum = false) {
        super(description, types, isRequired, acceptsMultiple, defaultValue, enums, enumProvider, forceEnum);
        this.name = name;
        this.aliasList = aliases ?? [];
    }
}
/** SlashCommand.js:33-63 */
export class SlashCommand {
    static fromProps(props) { return Object.assign(new this(), props); }
    name; callback; helpString; splitUnnamedArgument = false; aliases = []; returns; namedArgumentList = []; unnamedArgumentList = [];
}
/** SlashCommandParser.js:35-100 */
export class SlashCommandParser {
    static commands = {};
    static addCommand(command, callback, aliases, helpString = '') {
        this.addCommandObject(SlashCommand.fromProps({ name: command, callback, aliases, helpString }));
    }
    static addCommandObject(command) {
        for (const start of ['/', '#', ':', 'parser-flag', 'breakpoint']) {
            if (command.name.toLowerCase().startsWith(start) || (command.aliases ?? []).find(a => a.toLowerCase().startsWith(start))) {
                throw new Error(`Illegal Name. Slash command name cannot begin with "${start}".`);
            }
        }
        if (!(command instanceof SlashCommand)) throw new Error('not a SlashCommand');
        this.commands[command.name] = command;
        for (const alias of command.aliases ?? []) this.commands[alias] = command;
    }
}
/** Deprecated `registerSlashCommand` (script.js getContext, maps to SlashCommandParser.addCommand). */
function registerSlashCommand(command, callback, aliases, helpString) {
    SlashCommandParser.addCommand(command, callback, aliases, helpString);
}

/**
 * Run one `/command key=value text` line the way ST parses it and calls the callback: (namedArgs, unnamedValue).
 * SlashCommandParser.js:948-967 `parseCommand`: named arguments only while the text starts with `\w+=`
 * (1003-1005 `testNamedArgument`, any name), each value quoted (1195-1205) or up to whitespace (1225-1240),
 * whitespace skipped; the rest up to the end of the command is the unnamed value, so a `name=value` after
 * the text stays part of it. Enough of STscript for the tests (no pipes, closures or macros).
 */
export async function executeSlashCommand(line) {
    const m = String(line).trim().match(/^\/(\S+)\s*([\s\S]*)$/);
    if (!m) throw new Error(`not a slash command: ${line}`);
    const command = SlashCommandParser.commands[m[1]];
    if (!command) throw new Error(`unknown command /${m[1]}`);
    const named = {};
    let rest = m[2];
    for (;;) {
        const kv = rest.match(/^(\w+)=(?:"([^"]*)"|(\S*))\s*/);
        if (!kv) break;
        named[kv[1]] = kv[2] ?? kv[3];
        rest = rest.slice(kv[0].length);
    }
    return command.callback(named, rest);
}

// ---------------------------------------------------------------- extension loading (extensions.js:295-500)
const manifests = {};
const activeExtensions = new Set();
const modules = [];
/** utils.js:508-510 */
function isSubsetOf(a, b) {
    return (Array.isArray(a) && Array.isArray(b)) ? b.every(val => a.includes(val)) : false;
}

async function loadExtension(name) {
    const response = await fetch(`/scripts/extensions/${name}/manifest.json`);
    manifests[name] = await response.json();
    const manifest = manifests[name];
    // extensions.js:309: without `requires` the extension is silently skipped.
    if (!isSubsetOf(modules, manifest.requires)) {
        host.skipped.push(name);
        return;
    }
    await Promise.all([addExtensionScript(name, manifest), addExtensionStyle(name, manifest)]);
    activeExtensions.add(name);
}

/** extensions.js:450-471 */
function addExtensionStyle(name, manifest) {
    if (!manifest.css) return Promise.resolve();
    return new Promise((resolve, reject) => {
        const link = document.createElement('link');
        link.id = name;
        link.rel = 'stylesheet';
        link.type = 'text/css';
        link.href = `/scripts/extensions/${name}/${manifest.css}`;
        link.onload = () => resolve();
        link.onerror = e => reject(e);
        document.head.appendChild(link);
    });
}

/** extensions.js:475-500: a module script, resolved on load (ST does not wait for the module's own init). */
function addExtensionScript(name, manifest) {
    if (!manifest.js) return Promise.resolve();
    return new Promise((resolve, reject) => {
        const script = document.createElement('script');
        script.id = name;
        script.type = 'module';
        script.src = `/scripts/extensions/${name}/${manifest.js}`;
        script.async = true;
        script.onerror = err => reject(err);
        script.onload = () => resolve();
        document.body.appendChild(script);
    });
}

/** extensions.js:948-975 (newer ST: `(chat, contextSize, type)` -> `interceptor(chat, contextSize, abort, type)`) */
async function runGenerationInterceptors(chat, contextSize, type) {
    let aborted = false;
    let exitImmediately = false;
    const abort = immediately => {
        aborted = true;
        exitImmediately = immediately;
    };
    for (const manifest of Object.values(manifests).filter(x => x.generate_interceptor).sort((a, b) => a.loading_order - b.loading_order)) {
        const interceptorKey = manifest.generate_interceptor;
        if (typeof globalThis[interceptorKey] === 'function') {
            const started = performance.now();
            try {
                await globalThis[interceptorKey](chat, contextSize, abort, type);
            } catch (e) {
                console.error(`Failed running interceptor for ${manifest.display_name}`, e);
            }
            host.interceptorTimes.push(performance.now() - started);
        }
        if (exitImmediately) break;
    }
    return aborted;
}

// ---------------------------------------------------------------- chat operations
function getMessageTimeStamp() {
    return new Date().toISOString();
}

/** script.js:4894-4940 (append branch): push, then MESSAGE_SENT, addOneMessage, USER_MESSAGE_RENDERED, save. */
export async function sendMessageAsUser(messageText) {
    const message = { name: name1, is_user: true, is_system: false, send_date: getMessageTimeStamp(), mes: messageText, extra: {} };
    chat.push(message);
    const chat_id = chat.length - 1;
    await eventSource.emit(event_types.MESSAGE_SENT, chat_id);
    addOneMessage(message);
    await eventSource.emit(event_types.USER_MESSAGE_RENDERED, chat_id);
    saveChat();
    return message;
}

/** A fake model: answers deterministically and records the prompt it was given. */
function fakeBackendReply(promptMessages) {
    if (host.backendReplies.length) return host.backendReplies.shift();
    // Never echo the user's words: each reply would become a second copy of a planted fact.
    return `${name2} nods and pours another cup of tea (${chat.length}).`;
}

/** Final prompt as chat-completion messages, in ST's order: before-prompt, story string, in-prompt, chat with in-chat injections. */
function buildPrompt(coreChat, isContinue) {
    const beforeScenarioAnchor = getExtensionPrompt(extension_prompt_types.BEFORE_PROMPT).trimStart(); // script.js:3782
    const afterScenarioAnchor = getExtensionPrompt(extension_prompt_types.IN_PROMPT); // script.js:3783
    const storyString = `${beforeScenarioAnchor}You are ${name2}, talking with ${name1}.${afterScenarioAnchor}`;
    doChatInject(coreChat, isContinue); // script.js:3773
    const messages = [{ role: 'system', content: storyString, story: true }];
    for (const m of coreChat) {
        const role = m.injected
            ? ['system', 'user', 'assistant'][m.injectedRole]
            : (m.is_user ? 'user' : (m.extra?.type === 'narrator' ? 'system' : 'assistant'));
        messages.push({ role, name: m.name, content: m.mes, injected: !!m.injected });
    }
    return { messages, beforeScenarioAnchor, afterScenarioAnchor, storyString };
}

/**
 * The order of script.js `Generate` (3414-3700): GENERATION_STARTED, slash commands, GENERATION_AFTER_COMMANDS,
 * (regenerate: drop the last reply, MESSAGE_DELETED), the user's message (sendMessageAsUser -> MESSAGE_SENT),
 * coreChat = non-system messages (swipe: minus the last), interceptors, in-chat injection, the request, then
 * saveReply: MESSAGE_RECEIVED (script.js:5630-5725).
 * @param {string} [type] undefined/'normal', 'regenerate', 'swipe', 'continue', 'quiet', 'impersonate'
 * @param {{text?: string}} [options] the send textarea content
 */
export async function Generate(type, { text } = {}, dryRun = false) {
    const started = performance.now();
    await eventSource.emit(event_types.GENERATION_STARTED, type, {}, dryRun);
    const textarea = document.getElementById('send_textarea');
    if (text !== undefined) textarea.value = text;
    await eventSource.emit(event_types.GENERATION_AFTER_COMMANDS, type, {}, dryRun);

    let textareaText = '';
    if (type !== 'regenerate' && type !== 'swipe' && type !== 'quiet' && type !== 'impersonate' && !dryRun) {
        textareaText = String(textarea.value);
        textarea.value = '';
    } else if (chat.length && !chat[chat.length - 1].is_user && type !== 'quiet' && type !== 'swipe' && type !== 'impersonate' && type !== 'continue' && !dryRun) {
        // script.js:3527-3531 (removeLastMessage, 3393-3404: the last .mes element goes)
        chat.length = chat.length - 1;
        document.querySelector('#chat > .mes:last-of-type')?.remove();
        await eventSource.emit(event_types.MESSAGE_DELETED, chat.length);
    }
    if (textareaText !== '' && type !== 'quiet' && !dryRun) {
        await sendMessageAsUser(textareaText); // script.js:3568-3575
    }

    // script.js:3627-3650
    let coreChat = chat.filter(x => !x.is_system);
    if (type === 'swipe') coreChat.pop();
    coreChat = coreChat.map((chatItem, index) => ({ ...chatItem, mes: chatItem.mes, index }));

    const this_max_context = getMaxContextSize(); // script.js:3651, before the interceptors
    let aborted = false;
    if (!dryRun) aborted = await runGenerationInterceptors(coreChat, this_max_context, type); // script.js:3653-3662
    if (aborted) return { aborted: true };

    const prompt = buildPrompt(coreChat, type === 'continue');
    const record = { type, dryRun, prompt, interceptorMs: host.interceptorTimes.at(-1), totalMs: 0, chatId: getCurrentChatId(), maxContext: this_max_context };
    host.prompts.push(record);
    if (dryRun || type === 'quiet') {
        record.totalMs = performance.now() - started;
        return record;
    }
    // The request body reads the response length now (openai.js:1804 / script.js:4383 GENERATE_AFTER_DATA).
    record.request = main_api === 'openai'
        ? await buildChatCompletionRequest(prompt.messages.map(({ role, content }) => ({ role, content })))
        : await buildTextCompletionRequest(prompt.messages.map(m => m.content).join('\n'));

    const reply = fakeBackendReply(prompt.messages);
    await saveReply(type, reply);
    record.reply = reply;
    record.totalMs = performance.now() - started;
    await eventSource.emit(event_types.GENERATION_ENDED, chat.length);
    return record;
}

/** script.js:5630-5725 `saveReply`: swipe fills the new swipe slot, continue appends, else a new message. */
async function saveReply(type, getMessage) {
    const last = chat[chat.length - 1];
    if (type === 'swipe' && last && !last.is_user) {
        last.swipes.length++;
        if (last.swipe_id === last.swipes.length - 1) {
            last.mes = getMessage;
            last.send_date = getMessageTimeStamp();
            last.swipes[last.swipe_id] = getMessage;
            const chat_id = chat.length - 1;
            await eventSource.emit(event_types.MESSAGE_RECEIVED, chat_id, type);
            addOneMessage(chat[chat_id], { type: 'swipe' });
            await eventSource.emit(event_types.CHARACTER_MESSAGE_RENDERED, chat_id, type);
        }
    } else if ((type === 'continue' || type === 'append') && last) {
        last.mes += getMessage;
        const chat_id = chat.length - 1;
        await eventSource.emit(event_types.MESSAGE_RECEIVED, chat_id, type);
        addOneMessage(chat[chat_id], { type: 'swipe' });
        await eventSource.emit(event_types.CHARACTER_MESSAGE_RENDERED, chat_id, type);
    } else {
        chat.push({ name: name2, is_user: false, is_system: false, send_date: getMessageTimeStamp(), mes: getMessage, swipe_id: 0, swipes: [getMessage], extra: {} });
        const chat_id = chat.length - 1;
        await eventSource.emit(event_types.MESSAGE_RECEIVED, chat_id, type);
        addOneMessage(chat[chat_id]);
        await eventSource.emit(event_types.CHARACTER_MESSAGE_RENDERED, chat_id, type);
    }
    saveChat();
}

/**
 * script.js:6863-6890 `messageEditDone`: updateMessage writes chat[id].mes, MESSAGE_EDITED(id), then the
 * message's .mes_text is drawn again (nothing else of the message element changes).
 */
export async function editMessage(id, text) {
    chat[id].mes = text;
    if (Array.isArray(chat[id].swipes)) chat[id].swipes[chat[id].swipe_id ?? 0] = text;
    await eventSource.emit(event_types.MESSAGE_EDITED, id);
    updateMessageBlock(id, chat[id]);
    saveChat();
}

/**
 * script.js:10268-10290 (delete mode, "#dialogue_del_mes_ok"): the elements from `from` on are removed, the
 * chat is cut there, then MESSAGE_DELETED(chat.length).
 */
export async function deleteMessagesFrom(from) {
    for (const el of document.querySelectorAll('#chat .mes')) {
        if (Number(el.getAttribute('mesid')) >= from) el.remove();
    }
    chat.length = from;
    saveChat();
    await eventSource.emit(event_types.MESSAGE_DELETED, chat.length);
}

/**
 * script.js:10660-10702 (".mes_edit_delete"): splice one message, remove its element, renumber the rest
 * (7723-7735 `updateViewMessageIds`: each .mes gets mesid = first shown id + its position), then
 * MESSAGE_DELETED(chat.length).
 */
export async function deleteMessage(id) {
    chat.splice(id, 1);
    document.querySelector(`#chat .mes[mesid="${id}"]`)?.remove();
    updateViewMessageIds(id === 0);
    saveChat();
    await eventSource.emit(event_types.MESSAGE_DELETED, chat.length);
}

/**
 * script.js:8415-8560 `swipe_right`: to a stored swipe -> mes = swipes[id], the last message drawn again
 * (addOneMessage type 'swipe'), MESSAGE_SWIPED(chat.length - 1); past the last one -> MESSAGE_SWIPED, then
 * Generate('swipe') fills the new slot.
 */
export async function swipeRight() {
    const last = chat[chat.length - 1];
    if (last.swipe_id === undefined) {
        last.swipe_id = 0;
        last.swipes = [last.mes];
    }
    last.swipe_id++;
    if (last.swipe_id === last.swipes.length && chat.length !== 1) {
        await eventSource.emit(event_types.MESSAGE_SWIPED, chat.length - 1);
        return Generate('swipe');
    }
    last.mes = last.swipes[last.swipe_id];
    addOneMessage(last, { type: 'swipe' });
    await eventSource.emit(event_types.MESSAGE_SWIPED, chat.length - 1);
    return null;
}

/** script.js:8281-8410 `swipe_left`: back to the previous stored swipe, drawn again, MESSAGE_SWIPED(chat.length - 1). */
export async function swipeLeft() {
    const last = chat[chat.length - 1];
    if (!last.swipe_id) return;
    last.swipe_id--;
    last.mes = last.swipes[last.swipe_id];
    addOneMessage(last, { type: 'swipe' });
    await eventSource.emit(event_types.MESSAGE_SWIPED, chat.length - 1);
}

function saveChat() {
    const id = getCurrentChatId();
    if (id) chatFiles[id] = structuredClone(chat);
}

/**
 * script.js:6243-6305 `getChat`/`getChatResult` (and group-chats.js:220-260 for groups): replace the chat,
 * clearChat + printMessages, CHAT_CHANGED(getCurrentChatId()), then for a chat with only the greeting,
 * MESSAGE_RECEIVED(0) and CHARACTER_MESSAGE_RENDERED(0).
 */
async function loadCurrentChat() {
    const id = getCurrentChatId();
    chat.splice(0, chat.length, ...(chatFiles[id] ? structuredClone(chatFiles[id]) : []));
    let fresh = false;
    if (chat.length === 0 && !selected_group) {
        const character = characters[this_chid];
        chat.push({ name: character.name, is_user: false, is_system: false, send_date: getMessageTimeStamp(), mes: character.first_mes, swipe_id: 0, swipes: [character.first_mes], extra: {} });
        fresh = true;
    }
    name2 = selected_group ? 'Party' : characters[this_chid].name;
    clearChat();
    printMessages();
    saveChat();
    await eventSource.emit(event_types.CHAT_CHANGED, getCurrentChatId());
    if (fresh) await eventSource.emit(event_types.CHAT_CREATED);
    if (chat.length === 1) {
        await eventSource.emit(event_types.MESSAGE_RECEIVED, 0, 'first_message');
        await eventSource.emit(event_types.CHARACTER_MESSAGE_RENDERED, 0, 'first_message');
    }
}

/** Select a character (its current chat), as the character list click does. */
export async function selectCharacter(index) {
    selected_group = null;
    this_chid = index;
    await loadCurrentChat();
}

/** script.js:6337-6345 `openCharacterChat`: another chat file of the current character. */
export async function openCharacterChat(fileName) {
    characters[this_chid].chat = fileName;
    await loadCurrentChat();
}

/** group-chats.js: open a group's chat. */
export async function openGroupChat(groupId) {
    selected_group = groupId;
    this_chid = undefined;
    await loadCurrentChat();
}

/** script.js:1720-1740 `delCharChat`: delete a chat file, then CHAT_DELETED(name without .jsonl). */
export async function deleteCharacterChat(name) {
    delete chatFiles[name];
    await eventSource.emit(event_types.CHAT_DELETED, name);
}

/** group-chats.js:1080-1090: GROUP_CHAT_DELETED(chatId). */
export async function deleteGroupChat(chatId) {
    delete chatFiles[chatId];
    await eventSource.emit(event_types.GROUP_CHAT_DELETED, chatId);
}

// ---------------------------------------------------------------- the chat's DOM (script.js:535, 1775-1860, 2125-2440)
/** script.js:535: the message template (index.html #message_template), cloned for every message. */
const messageTemplate = () => document.querySelector('#message_template .mes');

/** script.js:1849-1853 `clearChat`: every child of #chat goes. */
function clearChat() {
    document.getElementById('chat')?.replaceChildren();
}

/** script.js:1804-1846 `printMessages`: every message (no chat truncation here), then the last one marked. */
function printMessages() {
    chat.forEach((item, i) => addOneMessage(item, { scroll: false, forceId: i, showSwipes: false }));
    markLastMessage();
}

function markLastMessage() {
    const all = document.querySelectorAll('#chat .mes');
    for (const el of all) el.classList.remove('last_mes');
    all[all.length - 1]?.classList.add('last_mes');
}

/** script.js:2125-2168 `getMessageFromTemplate`: a clone with the message's attributes, name, time and id. */
function getMessageFromTemplate({ mesId, swipeId, characterName, isUser, isSystem, timestamp }) {
    const mes = messageTemplate().cloneNode(true);
    for (const [name, value] of Object.entries({
        mesid: mesId, swipeid: swipeId, ch_name: characterName, is_user: isUser, is_system: !!isSystem,
        bookmark_link: '', force_avatar: false, timestamp,
    })) mes.setAttribute(name, String(value));
    mes.querySelector('.ch_name .name_text').textContent = characterName;
    mes.querySelector('.timestamp').textContent = timestamp;
    mes.querySelector('.mesIDDisplay').textContent = `#${mesId}`;
    return mes;
}

/**
 * script.js:2278-2440 `addOneMessage`: a new message element appended to #chat (its text put into .mes_text);
 * type 'swipe' draws the last message's text and time again in its existing element instead. Message text
 * is shown as text here (ST's messageFormatting renders markdown).
 */
function addOneMessage(mes, { type = 'normal', forceId = null } = {}) {
    const chatElement = document.getElementById('chat');
    if (!chatElement) return;
    const timestamp = mes.send_date ?? '';
    const mesId = forceId ?? chat.length - 1;
    if (type === 'swipe') {
        const swipeMessage = chatElement.querySelector(`[mesid="${chat.length - 1}"]`);
        if (!swipeMessage) return;
        swipeMessage.setAttribute('swipeid', String(mes.swipe_id ?? 0));
        swipeMessage.querySelector('.mes_text').textContent = mes.mes;
        swipeMessage.querySelector('.timestamp').textContent = timestamp;
        return;
    }
    const rendered = getMessageFromTemplate({
        mesId, swipeId: mes.swipe_id ?? 0, characterName: mes.name, isUser: mes.is_user, isSystem: mes.is_system, timestamp,
    });
    chatElement.append(rendered);
    chatElement.querySelector(`[mesid="${mesId}"] .mes_text`).append(mes.mes);
    markLastMessage();
}

/** script.js:2170-2176 `updateMessageBlock`: only the message's .mes_text is drawn again. */
function updateMessageBlock(messageId, message) {
    const el = document.querySelector(`#chat [mesid="${messageId}"] .mes_text`);
    if (el) el.textContent = message?.extra?.display_text ?? message.mes;
}

/** script.js:7723-7735 `updateViewMessageIds`: mesid = the first shown id + the element's position. */
function updateViewMessageIds(startFromZero = false) {
    const ids = [...document.querySelectorAll('#chat .mes')].map(el => Number(el.getAttribute('mesid'))).filter(x => !Number.isNaN(x));
    const minId = startFromZero ? 0 : Math.min(...ids);
    [...document.querySelectorAll('#chat .mes')].forEach((el, index) => {
        el.setAttribute('mesid', String(minId + index));
        el.querySelector('.mesIDDisplay').textContent = `#${minId + index}`;
    });
    markLastMessage();
}

// ---------------------------------------------------------------- getContext (script.js:8174-8262)
function getContext() {
    return {
        chat,
        characters,
        groups,
        name1,
        name2,
        characterId: this_chid,
        groupId: selected_group,
        chatId: selected_group ? groups.find(x => x.id == selected_group)?.chat_id : (this_chid !== undefined && characters[this_chid] && characters[this_chid].chat),
        getCurrentChatId,
        getRequestHeaders,
        saveSettingsDebounced,
        onlineStatus: 'Connected',
        maxContext: host.maxContext,
        eventSource,
        eventTypes: event_types,
        event_types,
        generate: Generate,
        mainApi: main_api,
        extensionPrompts: extension_prompts,
        setExtensionPrompt,
        SlashCommandParser,
        // newer ST (st-context.js) also exposes these; 1.12.6 only the parser
        SlashCommand,
        SlashCommandArgument,
        SlashCommandNamedArgument,
        ARGUMENT_TYPE,
        registerSlashCommand,
        renderExtensionTemplateAsync,
        callGenericPopup,
        Popup,
        POPUP_TYPE,
        POPUP_RESULT,
        extensionSettings: extension_settings,
    };
}

// ---------------------------------------------------------------- the test handle
export const host = {
    emitted: [],
    listenerTimes: [],
    interceptorTimes: [],
    prompts: [],
    popups: [],
    popupAnswer: POPUP_RESULT.AFFIRMATIVE,
    closePopup: () => {},
    backendReplies: [],
    maxContext: 8192,
    oai_settings,
    get mainApi() { return main_api; },
    get amountGen() { return amount_gen; },
    setMainApi,
    backendRequests: [],
    holdRaw: false,
    heldRaw: [],
    rawReply: '{"operations": []}',
    /** Let every held generateRaw request answer. */
    releaseBackend() { for (const resolve of host.heldRaw.splice(0)) resolve(); },
    skipped: [],
    get saveCount() { return saveCount; },
    chatFiles,
    extension_prompts,
    chat,
    Generate,
    editMessage,
    deleteMessage,
    deleteMessagesFrom,
    swipeRight,
    swipeLeft,
    selectCharacter,
    openCharacterChat,
    openGroupChat,
    deleteCharacterChat,
    deleteGroupChat,
    executeSlashCommand,
    getExtensionPrompt,
    getCurrentChatId,
    SlashCommandParser,
    loadExtension,
    activeExtensions,
};

window.SillyTavern = { getContext };
window.stHost = host;

/** script.js:10884-10897: the inline-drawer toggle (all contents inside the drawer, nested ones too). */
document.addEventListener('click', event => {
    const toggle = event.target.closest?.('.inline-drawer-toggle');
    if (!toggle || event.target.classList.contains('text_pole')) return;
    const drawer = toggle.closest('.inline-drawer');
    for (const icon of drawer.querySelectorAll('.inline-drawer-icon')) {
        icon.classList.toggle('down');
        icon.classList.toggle('up');
        icon.classList.toggle('fa-circle-chevron-down');
        icon.classList.toggle('fa-circle-chevron-up');
    }
    for (const content of drawer.querySelectorAll('.inline-drawer-content')) {
        content.style.display = getComputedStyle(content).display === 'none' ? 'block' : 'none';
    }
});

/** Boot like ST: settings loaded, extensions activated (extensions.js:295-340), then APP_READY (script.js:978). */
export async function boot({ extensions = ['third-party/st-bme-sidecar'], settings = null } = {}) {
    if (settings) Object.assign(extension_settings, settings);
    await eventSource.emit(event_types.EXTENSION_SETTINGS_LOADED);
    for (const name of extensions) await loadExtension(name);
    await eventSource.emit(event_types.SETTINGS_LOADED);
    await eventSource.emit(event_types.APP_READY);
}
host.boot = boot;
