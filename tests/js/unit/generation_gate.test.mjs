import { test } from 'node:test';
import assert from 'node:assert/strict';
import { GenerationGate } from '../../../st_extension/lib/generation_gate.js';
import { ManualClock } from '../support/clock.mjs';
import { waitFor } from '../support/wait.mjs';

/** A relayed request the test finishes by hand; `log` records starts and ends. */
function job(name, log) {
    let finish;
    const done = new Promise(resolve => { finish = resolve; });
    return { finish, work: async () => { log.push(`${name} start`); await done; log.push(`${name} end`); return name; } };
}

test('a chat generation that starts during an exclusive relay waits until it is done', async () => {
    const gate = new GenerationGate({ timers: new ManualClock() });
    const log = [];
    const relay = job('relay', log);
    const result = gate.runExclusive(relay.work);
    await waitFor(() => log.includes('relay start'), { what: 'the relay to start' });
    const chat = gate.chatStarting().then(() => log.push('chat proceeds'));
    await waitFor(() => gate.chatBusy, { what: 'the chat to be noted' });
    assert.deepEqual(log, ['relay start'], 'the chat waits');
    relay.finish();
    await chat;
    assert.deepEqual(log, ['relay start', 'relay end', 'chat proceeds']);
    assert.equal(await result, 'relay');
});

test('an exclusive relay waits for the chat generation to build its request; relays run one at a time', async () => {
    const clock = new ManualClock();
    const gate = new GenerationGate({ timers: clock });
    const log = [];
    await gate.chatStarting();
    const a = job('a', log);
    const b = job('b', log);
    gate.runExclusive(a.work);
    gate.runExclusive(b.work);
    await waitFor(() => clock.pending.length === 1, { what: 'a to wait for the chat' });
    assert.deepEqual(log, []);
    gate.chatSettled();
    await waitFor(() => log.includes('a start'), { what: 'a to start' });
    assert.deepEqual(log, ['a start'], 'b waits for a');
    a.finish();
    await waitFor(() => log.includes('b start'), { what: 'b to start' });
    assert.deepEqual(log, ['a start', 'a end', 'b start']);
    b.finish();
    await waitFor(() => log.includes('b end'), { what: 'b to end' });
});

test('a chat generation that never says it is done holds relays back only until the cap', async () => {
    const clock = new ManualClock();
    let now = 1000;
    const gate = new GenerationGate({ capMs: 30000, now: () => now, timers: clock });
    const log = [];
    await gate.chatStarting();
    const a = job('a', log);
    gate.runExclusive(a.work);
    await waitFor(() => clock.pending.length === 1, { what: 'the cap timer' });
    assert.deepEqual(clock.pending, [30000]);
    now += 30000;
    clock.fireNext();
    await waitFor(() => log.includes('a start'), { what: 'a to start after the cap' });
    a.finish();
});

test('a failing relay releases the gate', async () => {
    const gate = new GenerationGate({ timers: new ManualClock() });
    await assert.rejects(gate.runExclusive(async () => { throw new Error('no API'); }), /no API/);
    await gate.chatStarting(); // does not wait: nothing runs
    gate.chatSettled();
    assert.equal(await gate.runExclusive(async () => 'next'), 'next');
});
