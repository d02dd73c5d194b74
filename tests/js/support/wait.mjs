// The one way JS tests wait: poll a condition until it holds, with a generous deadline. Never a fixed
// sleep: a loaded machine makes any fixed delay too short sooner or later. To show that something does
// NOT happen, wait for a positive sign that the code got past the point where it would have happened.

/**
 * Poll until `fn()` returns a truthy value (or resolves to one) and return that value; throws after
 * `timeoutMs` naming `what` and the last error `fn` threw.
 * @template T
 * @param {() => T | Promise<T>} fn
 * @param {{timeoutMs?: number, intervalMs?: number, what?: string}} [options]
 * @returns {Promise<T>}
 */
export async function waitFor(fn, { timeoutMs = 30000, intervalMs = 50, what = 'condition' } = {}) {
    const deadline = Date.now() + timeoutMs;
    let lastError;
    for (;;) {
        try {
            const value = await fn();
            if (value) return value;
        } catch (error) {
            lastError = error;
        }
        if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${lastError ? `: ${lastError.message}` : ''}`);
        await new Promise(resolve => setTimeout(resolve, intervalMs));
    }
}
