// A manual clock for code that takes injected timers (`timers` option): nothing fires until the test
// says so, so delays are checked as numbers instead of raced against real time.

export class ManualClock {
    constructor() {
        /** @type {Map<number, {fn: Function, ms: number, repeat: boolean}>} */
        this.timers = new Map();
        this.nextId = 1;
        /** Delays of the timeouts fired so far, in order. */
        this.fired = [];
        this.setTimeout = (fn, ms = 0) => this.add(fn, ms, false);
        this.setInterval = (fn, ms = 0) => this.add(fn, ms, true);
        this.clearTimeout = id => { this.timers.delete(id); };
        this.clearInterval = id => { this.timers.delete(id); };
    }

    add(fn, ms, repeat) {
        const id = this.nextId++;
        this.timers.set(id, { fn, ms, repeat });
        return id;
    }

    /** Pending one-shot timeouts' delays, oldest first. */
    get pending() {
        return [...this.timers.values()].filter(t => !t.repeat).map(t => t.ms);
    }

    /** Fire the oldest pending timeout; returns its delay. */
    fireNext() {
        const entry = [...this.timers.entries()].find(([, t]) => !t.repeat);
        if (!entry) throw new Error('no pending timeout');
        const [id, timer] = entry;
        this.timers.delete(id);
        this.fired.push(timer.ms);
        timer.fn();
        return timer.ms;
    }
}
