import assert from 'node:assert/strict';
import test from 'node:test';

import { normalizeProgress, progressFraction, progressText, timeLeft } from '../../../st_extension/lib/progress.js';

test('time left reads in seconds, minutes or hours; unknown is empty', () => {
    assert.equal(timeLeft(42.4), 'about 42 s left');
    assert.equal(timeLeft(200), 'about 3 min 20 s left');
    assert.equal(timeLeft(3900), 'about 1 h 05 min left');
    assert.equal(timeLeft(null), '');
    assert.equal(timeLeft(-1), '');
});

test('a chat status and a live message give the same numbers', () => {
    const status = { working: true, messages: { done: 340, total: 2000 }, embedding: { done: 330, total: 340 }, eta_s: 200 };
    const live = { type: 'progress', task: 'extract', done: 340, total: 2000, embedded: 330, embed_total: 340, eta_s: 200, working: true };
    assert.deepEqual(normalizeProgress(status), normalizeProgress(live));
    assert.equal(progressText(status), 'Remembering: 340/2000 messages (17%), 330/340 memories embedded, about 3 min 20 s left');
    assert.equal(progressText(live), progressText(status));
});

test('finished work says so and shows no time left; the bar is full only when everything is embedded', () => {
    const done = { working: false, messages: { done: 12, total: 12 }, embedding: { done: 16, total: 16 }, eta_s: 0 };
    assert.equal(progressText(done), 'Remembered: 12/12 messages (100%), 16/16 memories embedded');
    assert.equal(progressFraction(done), 1);
    assert.equal(progressFraction({ ...done, embedding: { done: 10, total: 16 } }), 0.99);
    assert.equal(progressFraction({ working: true, messages: { done: 5, total: 20 }, embedding: { done: 5, total: 5 } }), 0.25);
    assert.equal(progressFraction({ messages: { done: 0, total: 0 } }), 1);
});

test('missing or odd fields never throw', () => {
    assert.equal(progressText(null), 'Remembering: 0/0 messages (100%)');
    assert.equal(progressText({ messages: { done: 'x' } }), 'Remembered: 0/0 messages (100%)');
});

test('a long ingest shows in the chat; a few new replies do not', async () => {
    const { isLongRun } = await import('../../../st_extension/lib/progress.js');
    assert.equal(isLongRun({ messages: { done: 0, total: 30 }, embedding: { done: 0, total: 0 }, working: true }), true);
    assert.equal(isLongRun({ messages: { done: 28, total: 30 }, embedding: { done: 5, total: 60 }, working: true }), true, 'embedding left');
    assert.equal(isLongRun({ done: 41, total: 42, embedded: 80, embed_total: 82 }), false);
    assert.equal(isLongRun({ messages: { done: 0, total: 300 }, working: false }), false, 'not working');
});
