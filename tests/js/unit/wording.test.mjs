import { test } from 'node:test';
import assert from 'node:assert/strict';
import { plural, recallReasons, statusReport, syncSummary } from '../../../st_extension/lib/wording.js';

test('counts read as words: one message, no raw index', () => {
    assert.equal(plural(1, 'message'), '1 message');
    assert.equal(plural(2, 'memory', 'memories'), '2 memories');
    assert.equal(syncSummary({ stored_length: 1, processed_upto: -1 }), '1 message, not remembered yet');
    assert.equal(syncSummary({ stored_length: 12, processed_upto: 11 }), '12 messages, all remembered');
    assert.equal(syncSummary({ stored_length: 40, processed_upto: 37 }), '40 messages, 38 remembered');
    assert.equal(syncSummary({ stored_length: 0, processed_upto: -1 }), 'no messages yet');
    assert.equal(syncSummary(null), '');
    for (const text of [syncSummary({ stored_length: 1, processed_upto: -1 }), syncSummary({ stored_length: 3, processed_upto: 0 })]) {
        assert.doesNotMatch(text, /#|-1|\b1 messages\b/);
    }
});

test('a recalled memory says why in words, not as a score', () => {
    assert.deepEqual(recallReasons({ pinned: true, score_parts: { lexical: 3 } }), ['pinned']);
    assert.deepEqual(recallReasons({ core: true }), ['always included']);
    assert.deepEqual(recallReasons({ score_parts: { lexical: 2.6, vector: 0.8 } }), ['shares words with your message']);
    assert.deepEqual(recallReasons({ score_parts: { lexical: 0, vector: 0.9 } }), ['similar in meaning']);
    assert.deepEqual(recallReasons({ score_parts: { lexical: 0, time: 1, graph: 0.4 } }), ['the day you asked about', 'linked to another memory found']);
    assert.deepEqual(recallReasons({ score_parts: { lexical: 0, neighbour: 1 } }), ['next to a message found']);
    assert.deepEqual(recallReasons({ score_parts: { lexical: 1.2, subject: 0.2 } }),
        ['said while what you refer to was talked about', 'shares words with your message']);
});

test('/memory-status speaks of the chat, not of the internals', () => {
    const lines = statusReport({
        connection: 'connected', version: '0.1.0', enabled: true, chatOpen: true,
        status: { chat_id: 'Elena - 2024-10-18@20h00m00s', messages: 42, nodes: 85, processed_upto: 39, jobs: { pending: 1, failed: 0 },
            index: { count: 80, embedder: 'local:multilingual-e5-small-q4' }, progress: { working: true } },
        injection: { status: 'injected', memories: [{}, {}, {}], tokens: 312 },
    });
    assert.deepEqual(lines, [
        'Memory: connected (sidecar 0.1.0).',
        'This chat: 42 messages, 40 remembered, as 85 memories.',
        'Working on it: 2 messages to go.',
        'Last reply: 3 memories used (312 tokens).',
    ]);
    const text = lines.join('\n');
    assert.doesNotMatch(text, /2024-10-18|e5|vectors|embedder|processed up to/);
    assert.deepEqual(statusReport({ connection: 'unreachable', problem: 'Start it with stbme serve.', enabled: true, chatOpen: false }),
        ['Memory: unreachable.', 'Start it with stbme serve.', 'No chat is open.']);
    assert.match(statusReport({ connection: 'connected', enabled: true, chatOpen: true, status: null }).join('\n'), /nothing remembered yet/);
    const failed = statusReport({ connection: 'connected', enabled: true, chatOpen: true,
        status: { messages: 2, nodes: 2, processed_upto: 1, jobs: { pending: 0, failed: 1, last_error: 'the LLM timed out' } } });
    assert.match(failed.join('\n'), /failed: the LLM timed out\. It is tried again/);
});
