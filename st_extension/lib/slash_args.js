// Named arguments of our slash commands, wherever the user typed them. ST's parser reads `name=value`
// only before the unnamed text (slash-commands/SlashCommandParser.js `parseCommand`: named arguments
// while `^(\w+)=` matches, then everything up to the end of the command is the unnamed value), so
// `/remember Mira fears water pin=true` reaches the callback as the text "Mira fears water pin=true".
// Pure module: no SillyTavern imports.

const BOOLEAN = /^(true|false|on|off|yes|no|1|0)$/i;

/** Validators of our named arguments' values. */
export const ARG_VALUES = Object.freeze({
    boolean: value => BOOLEAN.test(value),
    positiveInteger: value => /^\d+$/.test(value) && Number(value) > 0,
});

/**
 * Take `name=value` tokens off the end of the text when the name is one of ours and the value is valid
 * (so "x=y" inside a memory stays text unless it is exactly one of our arguments).
 * @param {string} text the unnamed value ST passed
 * @param {Record<string, (value: string) => boolean>} specs argument name -> value check
 * @returns {{text: string, args: Record<string, string>}}
 */
export function takeTrailingNamedArgs(text, specs) {
    let rest = String(text ?? '');
    const args = {};
    for (;;) {
        const m = rest.match(/(^|\s)(\w+)=("([^"]*)"|\S+)\s*$/);
        if (!m || !Object.hasOwn(specs, m[2]) || Object.hasOwn(args, m[2])) break;
        const value = m[4] ?? m[3];
        if (!specs[m[2]](value)) break;
        args[m[2]] = value;
        rest = rest.slice(0, m.index);
    }
    return { text: rest.trim(), args };
}

/**
 * A boolean argument's value ('true', 'on', 'yes', '1' are true).
 * @param {unknown} value
 */
export function isTrue(value) {
    return /^(true|on|yes|1)$/i.test(String(value ?? '').trim());
}
