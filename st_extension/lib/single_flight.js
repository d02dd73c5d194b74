// One run at a time: a call while a run is in flight joins it and asks for one more run after it, so the
// last change is always seen and never more than two runs queue up. Pure module.

/**
 * @param {() => Promise<void>} fn the work; its errors are the caller's to catch inside it
 * @returns {() => Promise<void>} start (or join) a run; resolves when no run is asked for any more
 */
export function singleFlight(fn) {
    let running = null;
    let again = false;
    return function run() {
        if (running) {
            again = true;
            return running;
        }
        running = (async () => {
            do {
                again = false;
                await fn();
            } while (again);
        })().finally(() => { running = null; });
        return running;
    };
}
