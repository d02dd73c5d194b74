import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
    BASIC_SETTINGS, DEFAULTS, MODULE_NAME, PROMPT_ROLES, PROMPT_TYPES, buildRecallRequest, controlFor, formatControlValue,
    getSettings, humanize, injectionArgs, labelFor, normalizeUrl, parseControlValue, schemaToGroups, splitBasicAdvanced,
} from '../../../st_extension/lib/settings.js';

test('defaults fill a fresh extension_settings and are not shared', () => {
    const ext = {};
    const s = getSettings(ext);
    assert.equal(ext[MODULE_NAME], s);
    assert.deepEqual({ ...s }, { ...DEFAULTS });
    s.enabled = false;
    assert.equal(DEFAULTS.enabled, true);
    assert.ok(Object.isFrozen(DEFAULTS));
});

test('missing keys are filled and renamed keys migrated after an upgrade', () => {
    const ext = { [MODULE_NAME]: { sidecar_url: 'http://10.0.0.2:8765/', timeoutMs: 2500, token: 'abc', use_proxy: true, enabled: false } };
    const s = getSettings(ext);
    assert.equal(s.sidecarUrl, 'http://10.0.0.2:8765');
    assert.equal(s.recallTimeoutMs, 2500);
    assert.equal(s.apiToken, 'abc');
    assert.equal(s.connection, 'proxy');
    assert.equal(s.enabled, false);
    assert.equal(s.syncDebounceMs, DEFAULTS.syncDebounceMs);
    for (const key of ['sidecar_url', 'timeoutMs', 'token', 'use_proxy']) assert.ok(!(key in s), key);
});

test('bad stored values fall back to defaults', () => {
    const s = getSettings({ [MODULE_NAME]: { connection: 'carrier-pigeon', sidecarUrl: 'not a url', recallTimeoutMs: -5, enabled: 'yes' } });
    assert.equal(s.connection, 'auto');
    assert.equal(s.sidecarUrl, DEFAULTS.sidecarUrl);
    assert.equal(s.recallTimeoutMs, DEFAULTS.recallTimeoutMs);
    assert.equal(s.enabled, true);
});

test('urls are normalized', () => {
    assert.equal(normalizeUrl(' http://127.0.0.1:8765/// '), 'http://127.0.0.1:8765');
    assert.equal(normalizeUrl('ftp://x'), '');
    assert.equal(normalizeUrl(''), '');
});

test('injection settings map to setExtensionPrompt arguments (ST enums)', () => {
    assert.deepEqual(injectionArgs({ 'inject.position': 'in_chat', 'inject.depth': 2, 'inject.role': 'user' }),
        { position: PROMPT_TYPES.IN_CHAT, depth: 2, role: PROMPT_ROLES.USER });
    assert.deepEqual(injectionArgs({ 'inject.position': 'before_prompt', 'inject.depth': 0, 'inject.role': 'assistant' }),
        { position: 2, depth: 0, role: 2 });
    assert.deepEqual(injectionArgs({ 'inject.position': 'in_prompt' }), { position: 0, depth: 4, role: 0 });
    assert.deepEqual(injectionArgs({}), { position: 1, depth: 4, role: 0 });
    assert.deepEqual(injectionArgs({ 'inject.depth': -3 }).depth, 4);
});

const SCHEMA = [
    { name: 'recall.budget_tokens', type: 'int', default: 800, min: 50, max: 16000, choices: null, help: 'Budget', group: 'recall', per_chat: true, secret: false },
    { name: 'recall.min_similarity', type: 'float', default: 0.8, min: 0, max: 1, help: 'sim', group: 'recall' },
    { name: 'inject.position', type: 'choice', default: 'in_chat', choices: ['in_chat', 'in_prompt', 'before_prompt'], help: '', group: 'inject', per_chat: true },
    { name: 'extract.enabled', type: 'bool', default: true, help: '', group: 'extract', per_chat: true },
    { name: 'server.cors_origins', type: 'list', default: ['http://127.0.0.1:8000'], help: '', group: 'server' },
    { name: 'embed.openai_key', type: 'str', default: '', help: '', group: 'embed', secret: true },
    { name: 'zeta.new_thing', type: 'tensor', default: null, help: 'from a newer sidecar' },
];

test('schema becomes ordered groups of typed controls; unknown types still render', () => {
    const groups = schemaToGroups(SCHEMA);
    assert.deepEqual(groups.map(g => g.group), ['inject', 'recall', 'extract', 'embed', 'server', 'zeta']);
    const recall = groups.find(g => g.group === 'recall');
    assert.equal(recall.title, 'Recall');
    assert.deepEqual(recall.controls.map(c => c.input), ['number', 'number']);
    assert.equal(recall.controls[0].step, 1);
    assert.equal(recall.controls[1].step, 0.01);
    assert.equal(recall.controls[0].perChat, true);
    assert.deepEqual(groups[0].controls[0].choices, ['in_chat', 'in_prompt', 'before_prompt']);
    assert.equal(controlFor(SCHEMA[3]).input, 'checkbox');
    assert.equal(controlFor(SCHEMA[4]).input, 'textarea');
    assert.equal(controlFor(SCHEMA[5]).input, 'password');
    assert.equal(controlFor(SCHEMA[6]).input, 'text');
    assert.equal(labelFor('recall.budget_tokens'), 'Memory block size (tokens)');
    assert.equal(labelFor('recall.min_similarity'), 'Min similarity');
    assert.deepEqual(schemaToGroups(null), []);
});

test('choices show words, not raw values; unknown values are humanized', () => {
    const position = controlFor(SCHEMA.find(s => s.name === 'inject.position'));
    assert.deepEqual(position.choices, ['in_chat', 'in_prompt', 'before_prompt'], 'values stay raw');
    assert.deepEqual(position.choiceLabels, ['In the chat, at a depth', 'After the story string', 'Before the story string']);
    const newer = controlFor({ name: 'x.mode', type: 'choice', choices: ['fast_and_loose', 'slow'] });
    assert.deepEqual(newer.choiceLabels, ['Fast and loose', 'Slow']);
    for (const label of [...position.choiceLabels, ...newer.choiceLabels]) assert.doesNotMatch(label, /_/);
    assert.equal(humanize('before_prompt'), 'Before prompt');
});

test('a few basic settings come first, in their order; the rest are grouped under advanced', () => {
    const { basic, advanced } = splitBasicAdvanced(SCHEMA);
    assert.deepEqual(basic.map(c => c.name), ['recall.budget_tokens', 'inject.position', 'extract.enabled']);
    assert.deepEqual(advanced.map(g => g.group), ['recall', 'embed', 'server', 'zeta']);
    const all = [...basic.map(c => c.name), ...advanced.flatMap(g => g.controls.map(c => c.name))];
    assert.deepEqual(all.sort(), SCHEMA.map(s => s.name).sort(), 'every setting appears exactly once');
    assert.ok(BASIC_SETTINGS.length <= 12, 'basic stays short');
    assert.deepEqual(splitBasicAdvanced(null), { basic: [], advanced: [] });
});

test('control values parse to the setting type', () => {
    const c = name => controlFor(SCHEMA.find(s => s.name === name));
    assert.deepEqual(parseControlValue(c('recall.budget_tokens'), ' 600 '), { value: 600 });
    assert.ok('error' in parseControlValue(c('recall.budget_tokens'), '6.5'));
    assert.ok('error' in parseControlValue(c('recall.budget_tokens'), ''));
    assert.deepEqual(parseControlValue(c('recall.min_similarity'), '0.75'), { value: 0.75 });
    assert.ok('error' in parseControlValue(c('recall.min_similarity'), 'abc'));
    assert.deepEqual(parseControlValue(c('extract.enabled'), false), { value: false });
    assert.deepEqual(parseControlValue(c('server.cors_origins'), 'http://a:1\n http://b:2 ,\n'), { value: ['http://a:1', 'http://b:2'] });
    assert.deepEqual(parseControlValue(c('inject.position'), 'in_prompt'), { value: 'in_prompt' });
    // Range checks are the sidecar's job: out-of-range numbers are sent and rejected there, by field.
    assert.deepEqual(parseControlValue(c('recall.budget_tokens'), '1'), { value: 1 });
    assert.equal(formatControlValue(c('server.cors_origins'), ['a', 'b']), 'a\nb');
    assert.equal(formatControlValue(c('embed.openai_key'), '***'), '');
    assert.equal(formatControlValue(c('extract.enabled'), 0), false);
});

test('recall request: newest user message is the query, recent turns before it, newest last', () => {
    const chat = [
        { is_user: false, name: 'Elena', mes: 'Welcome.' },
        { is_user: true, name: 'Alex', mes: 'Hi' },
        { is_user: false, name: 'Elena', mes: 'Hello' },
        { is_system: true, name: 'System', mes: 'note' },
        { is_user: true, name: 'Alex', mes: 'What was the vault code?' },
    ];
    const body = buildRecallRequest(chat, { recentMessages: 2, budgetTokens: 600 });
    assert.equal(body.query, 'What was the vault code?');
    assert.deepEqual(body.recent, [
        { role: 'user', name: 'Alex', text: 'Hi' },
        { role: 'assistant', name: 'Elena', text: 'Hello' },
    ]);
    assert.equal(body.budget_tokens, 600);
    assert.ok(!('max_memories' in body));
    // continue: the assistant message after the query is context too
    const cont = buildRecallRequest([...chat, { is_user: false, name: 'Elena', mes: 'It was' }], { recentMessages: 2 });
    assert.equal(cont.query, 'What was the vault code?');
    assert.deepEqual(cont.recent.map(m => m.text), ['Hello', 'It was']);
    assert.deepEqual(buildRecallRequest(chat, { recentMessages: 0 }).recent, []);
    assert.equal(buildRecallRequest([], {}).query, '');
    assert.equal(buildRecallRequest([{ is_user: false, mes: 'greeting' }]).query, '');
});
