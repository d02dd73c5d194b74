// Slash commands: /memory-status, /remember, /recall, /memory-used (each with an /stbme-* alias).
// Registered with ST's SlashCommandParser (slash-commands/SlashCommandParser.js `addCommandObject`).

import { ARG_VALUES, isTrue, takeTrailingNamedArgs } from '../lib/slash_args.js';
import { LOG, ctx, currentChatId, importSt, toast } from './st.js';

function failCommand(message) {
    toast('warning', message);
    return '';
}

/**
 * The commands as plain descriptors.
 * @param {object} deps
 * @param {Record<string, string>} deps.T ST's ARGUMENT_TYPE
 * @param {ReturnType<import('./connection.js').createConnection>} deps.connection
 * @param {() => Promise<string>} deps.statusText
 * @param {() => object|null} deps.lastInjection
 * @param {() => void} deps.openInjection
 * @param {() => void} deps.onRemembered
 */
function commandList({ T, connection, statusText, lastInjection, openInjection, onRemembered }) {
    return [
        {
            name: 'memory-status',
            aliases: ['stbme-status'],
            helpString: 'Show the ST-BME memory sidecar status for the current chat: connection, messages synced, memories, processing queue and the last injection.',
            returns: 'status text',
            callback: async () => {
                const text = await statusText();
                toast('info', text.replace(/\n/g, '<br>'), { escapeHtml: false, timeOut: 8000 });
                return text;
            },
        },
        {
            name: 'remember',
            aliases: ['stbme-remember'],
            helpString: 'Store a memory for the current chat, e.g. <code>/remember Elena is afraid of deep water</code>. ' +
                'Add <code>pin=true</code>, before or after the text, to keep it in every recall.',
            returns: 'the new memory id',
            named: [{ name: 'pin', description: 'always include this memory', type: T.BOOLEAN, defaultValue: 'false' }],
            unnamed: [{ description: 'what to remember', type: T.STRING, required: true }],
            callback: async (args, value) => {
                const { text, args: after } = takeTrailingNamedArgs(value, { pin: ARG_VALUES.boolean });
                const chatId = currentChatId();
                if (!chatId) return failCommand('Open a chat first.');
                if (!text) return failCommand('Usage: /remember <text> [pin=true]');
                try {
                    const body = { text };
                    if (isTrue(after.pin ?? args?.pin)) body.pinned = true;
                    const res = await connection.client.createNode(chatId, body);
                    toast('success', `Remembered: ${text.slice(0, 80)}`);
                    onRemembered();
                    return res.node?.id ?? '';
                } catch (error) {
                    return failCommand(`Could not remember: ${error.message}`);
                }
            },
        },
        {
            name: 'recall',
            aliases: ['stbme-recall'],
            helpString: 'Search the memories of the current chat, e.g. <code>/recall the vault code</code>. Returns the memory block the sidecar would inject. ' +
                '<code>budget=300</code> (before or after the text) sets its size in tokens.',
            returns: 'memory block text',
            named: [{ name: 'budget', description: 'token budget of the block', type: T.NUMBER }],
            unnamed: [{ description: 'what to search for', type: T.STRING, required: true }],
            callback: async (args, value) => {
                const { text: query, args: after } = takeTrailingNamedArgs(value, { budget: ARG_VALUES.positiveInteger });
                const chatId = currentChatId();
                if (!chatId) return failCommand('Open a chat first.');
                if (!query) return failCommand('Usage: /recall <query> [budget=N]');
                try {
                    const body = { query };
                    const budget = Number(after.budget ?? args?.budget);
                    if (Number.isInteger(budget) && budget > 0) body.budget_tokens = budget;
                    const res = await connection.client.recall(chatId, body);
                    return res.text ?? '';
                } catch (error) {
                    return failCommand(`Recall failed: ${error.message}`);
                }
            },
        },
        {
            name: 'memory-used',
            aliases: ['stbme-used'],
            helpString: 'Show the memory block injected into the last generation.',
            returns: 'memory block text',
            callback: async () => {
                openInjection();
                return lastInjection()?.text ?? '';
            },
        },
    ];
}

/**
 * Register the commands with ST. ST 1.12 exposes only the parser on getContext(); the command classes
 * are ES modules next to it (newer ST has them on the context too).
 * @param {Omit<Parameters<typeof commandList>[0], 'T'>} deps
 */
export async function registerCommands(deps) {
    const c = ctx();
    let { SlashCommandParser, SlashCommand, SlashCommandArgument, SlashCommandNamedArgument, ARGUMENT_TYPE } = c;
    if (SlashCommandParser && (!SlashCommand || !SlashCommandArgument)) {
        try {
            ({ SlashCommand } = await importSt('scripts/slash-commands/SlashCommand.js'));
            ({ SlashCommandArgument, SlashCommandNamedArgument, ARGUMENT_TYPE } = await importSt('scripts/slash-commands/SlashCommandArgument.js'));
        } catch (error) {
            console.warn(LOG, 'slash command classes not found', error);
        }
    }
    const T = ARGUMENT_TYPE ?? { STRING: 'string', NUMBER: 'number', BOOLEAN: 'bool' };
    for (const command of commandList({ ...deps, T })) {
        try {
            if (SlashCommandParser && SlashCommand && SlashCommandArgument) {
                SlashCommandParser.addCommandObject(SlashCommand.fromProps({
                    name: command.name,
                    aliases: command.aliases,
                    callback: command.callback,
                    helpString: command.helpString,
                    returns: command.returns,
                    namedArgumentList: (command.named ?? []).map(a =>
                        SlashCommandNamedArgument.fromProps({ name: a.name, description: a.description, typeList: [a.type], isRequired: false, defaultValue: a.defaultValue ?? null })),
                    unnamedArgumentList: (command.unnamed ?? []).map(a =>
                        SlashCommandArgument.fromProps({ description: a.description, typeList: [a.type], isRequired: !!a.required })),
                }));
            } else if (typeof c.registerSlashCommand === 'function') {
                c.registerSlashCommand(command.name, command.callback, command.aliases, command.helpString);
            }
        } catch (error) {
            console.error(LOG, `cannot register /${command.name}`, error);
        }
    }
}
