// Keeps relayed LLM requests that change ST's global response length apart from chat generations.
// ST 1.12.6 `generateRaw(…, responseLength)` overwrites `amount_gen` / `oai_settings.openai_max_tokens`
// until it returns (script.js `saveResponseLength`/`restoreResponseLength`), and a chat generation reads
// them from its start (script.js `Generate`: `getMaxContextSize()` before the interceptors, the request
// body after). So such a relayed request starts only when no chat generation is between its start and
// its built request, runs one at a time (two overlapping save/restore pairs would leave the relay's length
// in the user's settings), and a chat generation that starts meanwhile waits in GENERATION_STARTED (which
// ST awaits before it reads anything) until the request is done. Pure module: timers are injected.

export class GenerationGate {
    /**
     * @param {object} [options]
     * @param {number} [options.capMs] longest a started chat generation holds relays back: ST does not
     *   always say when it is done (a generation stopped by a slash command emits nothing more)
     * @param {() => number} [options.now]
     * @param {{setTimeout: Function, clearTimeout: Function}} [options.timers]
     */
    constructor({ capMs = 30000, now = () => Date.now(), timers = globalThis } = {}) {
        this.capMs = capMs;
        this.now = now;
        this.timers = timers;
        this.busyUntil = 0;
        /** @type {Set<() => void>} relays waiting for the chat generation to settle */
        this.waiting = new Set();
        /** @type {Promise<void> | null} the exclusive relay running now */
        this.running = null;
        this.queue = Promise.resolve();
    }

    /** True while a chat generation may still read ST's generation settings. */
    get chatBusy() {
        return this.busyUntil > this.now();
    }

    /**
     * A chat generation starts (GENERATION_STARTED, not a dry run): resolves once no exclusive relay runs.
     * ST awaits this before it reads its settings.
     */
    async chatStarting() {
        this.busyUntil = this.now() + this.capMs;
        while (this.running) await this.running;
        this.busyUntil = this.now() + this.capMs;
    }

    /** The chat generation has built its request, or ended, or stopped: its settings are read. */
    chatSettled() {
        this.busyUntil = 0;
        for (const wake of [...this.waiting]) wake();
    }

    async chatIdle() {
        while (this.chatBusy) {
            await new Promise(resolve => {
                const wake = () => {
                    this.timers.clearTimeout(timer);
                    this.waiting.delete(wake);
                    resolve();
                };
                const timer = this.timers.setTimeout(wake, Math.max(0, this.busyUntil - this.now()));
                this.waiting.add(wake);
            });
        }
    }

    /**
     * Run a relayed request that changes ST's settings: after any chat generation in progress has read
     * its settings, one at a time, with chat generations held back until it is done.
     * @template T
     * @param {() => Promise<T>} work
     * @returns {Promise<T>}
     */
    runExclusive(work) {
        const turn = this.queue.then(async () => {
            await this.chatIdle();
            // No await between the check above and this line: a chat generation cannot slip in.
            let done;
            this.running = new Promise(resolve => { done = resolve; });
            try {
                return await work();
            } finally {
                this.running = null;
                done();
            }
        });
        this.queue = turn.then(() => {}, () => {});
        return turn;
    }
}
