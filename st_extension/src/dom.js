// DOM helpers for the panel. Sidecar data only ever reaches the page as text, never as HTML.

/**
 * Create an element. `text` sets textContent; `on<event>` functions become listeners.
 * @param {string} tag
 * @param {Record<string, any>} [attrs]
 * @param {(Node|string|null|undefined)[]} [children]
 * @returns {HTMLElement}
 */
export function h(tag, attrs = {}, children = []) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs)) {
        if (value === undefined || value === null || value === false) continue;
        if (key === 'text') node.textContent = String(value);
        else if (key === 'class') node.className = value;
        else if (key.startsWith('on') && typeof value === 'function') node.addEventListener(key.slice(2), value);
        else if (value === true) node.setAttribute(key, '');
        else node.setAttribute(key, String(value));
    }
    for (const child of children) if (child !== null && child !== undefined) node.append(child);
    return node;
}

/** @param {string} id */
export const $id = id => document.getElementById(id);

/**
 * Show or hide a panel section.
 * @param {string} id
 * @returns {boolean} visible now
 */
export function toggleSection(id) {
    const section = $id(id);
    if (!section) return false;
    section.hidden = !section.hidden;
    return !section.hidden;
}

/**
 * Wire a panel button: the click never follows a link, and an error becomes a toast.
 * @param {string} id
 * @param {() => any} fn
 * @param {(error: Error) => void} onError
 */
export function onClick(id, fn, onError) {
    $id(id)?.addEventListener('click', event => {
        event.preventDefault();
        try {
            Promise.resolve(fn()).catch(onError);
        } catch (error) {
            onError(error);
        }
    });
}
