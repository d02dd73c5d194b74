import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ARG_VALUES, isTrue, takeTrailingNamedArgs } from '../../../st_extension/lib/slash_args.js';

const REMEMBER = { pin: ARG_VALUES.boolean };

test('a named argument after the text is taken off the text', () => {
    assert.deepEqual(takeTrailingNamedArgs('Mira fears water pin=true', REMEMBER), { text: 'Mira fears water', args: { pin: 'true' } });
    assert.deepEqual(takeTrailingNamedArgs('Mira fears water   pin=off  ', REMEMBER), { text: 'Mira fears water', args: { pin: 'off' } });
    assert.deepEqual(takeTrailingNamedArgs('vault code budget=300', { budget: ARG_VALUES.positiveInteger }), { text: 'vault code', args: { budget: '300' } });
    assert.deepEqual(takeTrailingNamedArgs('x budget="250"', { budget: ARG_VALUES.positiveInteger }), { text: 'x', args: { budget: '250' } });
});

test('text that only looks like an argument stays text', () => {
    for (const text of ['Mira set pin=1234 on the safe', 'the formula is e=mc2', 'Mira fears water pin=maybe', 'Mira fears water pin=true pin=false']) {
        const { text: rest, args } = takeTrailingNamedArgs(text, REMEMBER);
        if (text.endsWith('pin=true pin=false')) {
            assert.deepEqual(args, { pin: 'false' }, 'the last one is taken once');
            assert.equal(rest, 'Mira fears water pin=true');
        } else {
            assert.equal(rest, text);
            assert.deepEqual(args, {});
        }
    }
    assert.deepEqual(takeTrailingNamedArgs('', REMEMBER), { text: '', args: {} });
});

test('boolean values', () => {
    for (const v of ['true', 'TRUE', 'on', 'yes', '1']) assert.equal(isTrue(v), true, v);
    for (const v of ['false', 'off', 'no', '0', '', undefined, null]) assert.equal(isTrue(v), false, String(v));
});
