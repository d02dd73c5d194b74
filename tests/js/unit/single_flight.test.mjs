import { test } from 'node:test';
import assert from 'node:assert/strict';
import { singleFlight } from '../../../st_extension/lib/single_flight.js';

test('calls during a run join it and ask for exactly one more run', async () => {
    let runs = 0;
    let release;
    const run = singleFlight(async () => {
        runs++;
        if (runs === 1) await new Promise(resolve => { release = resolve; });
    });
    const first = run();
    const second = run();
    const third = run();
    assert.equal(second, first, 'joined');
    assert.equal(third, first);
    release();
    await first;
    assert.equal(runs, 2, 'the calls during the first run made one more, not two');
    await run();
    assert.equal(runs, 3, 'a call after the runs starts a new one');
});
