// Hash vectors shared with the Python side (tests/fixtures/hash_vectors.json, computed with hashlib).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { createHash } from 'node:crypto';
import { chainHash, messageHash, messageParts, messageRole, sha256Hex } from '../../../st_extension/lib/hash.js';

const vectors = JSON.parse(readFileSync(new URL('../../fixtures/hash_vectors.json', import.meta.url), 'utf8'));

test('sha256 matches Python hashlib on the shared vectors', () => {
    for (const { input, hex } of vectors.sha256) assert.equal(sha256Hex(input), hex, JSON.stringify(input.slice(0, 20)));
});

test('sha256 matches node:crypto across block boundaries and non-ASCII', () => {
    const samples = [];
    for (let n = 0; n < 200; n++) samples.push('x'.repeat(n));
    samples.push('😀'.repeat(100), '中文'.repeat(77), 'a\u0000b', '\r\n\t', 'é'.repeat(63));
    for (const s of samples) assert.equal(sha256Hex(s), createHash('sha256').update(s, 'utf8').digest('hex'), `length ${s.length}`);
});

test('message hashes and the chain match the fixture', () => {
    let chain = '';
    vectors.messages.forEach((m, i) => {
        assert.equal(messageHash(m.role, m.name, m.text), m.hash, `hash of message ${i}`);
        chain = chainHash(chain, m.hash);
        assert.equal(chain, vectors.chain[i], `chain at ${i}`);
    });
});

test('roles map from ST flags', () => {
    assert.equal(messageRole({ is_user: true }), 'user');
    assert.equal(messageRole({ is_system: true }), 'system');
    assert.equal(messageRole({ is_user: false, is_system: false }), 'assistant');
    assert.equal(messageRole({ is_user: true, is_system: true }), 'user');
    assert.deepEqual(messageParts({ mes: 'hi' }), { role: 'assistant', name: '', text: 'hi' });
    assert.deepEqual(messageParts({ is_user: true, name: 'Alex', mes: '' }), { role: 'user', name: 'Alex', text: '' });
});
