import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
    APPLIES_WHEN, CHOICE_LABELS, JARGON, SETTING_HELP, SETTING_LABELS, applies, helpFor, helpSaysMore,
} from '../../../st_extension/lib/setting_words.js';

test('the LLM API fields apply only to an OpenAI-compatible memory LLM, the relay wait only to the relay', () => {
    for (const name of ['llm.url', 'llm.key', 'llm.model']) {
        assert.equal(applies(name, { 'llm.mode': 'openai' }), true, name);
        assert.equal(applies(name, { 'llm.mode': 'none' }), false, name);
        assert.equal(applies(name, { 'llm.mode': 'relay' }), false, name);
    }
    assert.equal(applies('llm.relay_timeout_s', { 'llm.mode': 'relay' }), true);
    assert.equal(applies('llm.relay_timeout_s', { 'llm.mode': 'openai' }), false);
    assert.equal(applies('extract.every', { 'llm.mode': 'none' }), false, 'no LLM: nothing reads every N replies');
    assert.equal(applies('extract.every', { 'llm.mode': 'relay' }), true);
});

test('depth and role apply to the in-chat position only; settings without a rule always apply', () => {
    assert.equal(applies('inject.depth', { 'inject.position': 'in_chat' }), true);
    assert.equal(applies('inject.depth', { 'inject.position': 'before_prompt' }), false);
    assert.equal(applies('inject.role', { 'inject.position': 'in_prompt' }), false);
    assert.equal(applies('recall.budget_tokens', {}), true);
    assert.equal(applies('llm.url', null), true, 'values not loaded yet: shown');
    for (const [name, rule] of Object.entries(APPLIES_WHEN)) assert.equal(typeof rule, 'function', name);
});

test('a help text that repeats its label is caught; the panel words say more', () => {
    assert.equal(helpSaysMore('Recall memories before each reply', 'Return memories before each generation.'), false);
    assert.equal(helpSaysMore('Role of the block', 'Role of the injected block.'), false);
    for (const [name, help] of Object.entries(SETTING_HELP)) {
        const label = SETTING_LABELS[name] ?? name.split('.').pop().replace(/_/g, ' ');
        assert.ok(helpSaysMore(label, help), `${name}: "${help}" repeats "${label}"`);
    }
});

test('the panel words hold no internals', () => {
    for (const text of ["Memory LLM: 'none' / 'openai' / 'relay'", 'Weight of the BM25 ranking in reciprocal-rank fusion.',
        'at this cosine or above', 'before extract.llm_every assistant messages']) {
        assert.match(text, JARGON, text);
    }
    const words = [...Object.values(SETTING_HELP), ...Object.values(SETTING_LABELS),
        ...Object.values(CHOICE_LABELS).flatMap(Object.values)];
    for (const text of words) assert.doesNotMatch(text, JARGON, text);
    assert.equal(helpFor('recall.enabled', 'Return memories before each generation.'), SETTING_HELP['recall.enabled']);
    assert.equal(helpFor('embed.batch_size', 'Texts per embedding call.'), 'Texts per embedding call.');
});

test('every choice label is short enough for a select in a phone-wide panel', () => {
    for (const [name, labels] of Object.entries(CHOICE_LABELS)) {
        for (const label of Object.values(labels)) assert.ok(label.length <= 32, `${name}: "${label}"`);
    }
});
