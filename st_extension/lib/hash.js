// Message hashing shared bit for bit with the sidecar (docs/api.md, "Message hashing").
//
// A small synchronous SHA-256: `crypto.subtle` only exists in secure contexts, and phone users open
// SillyTavern over plain http on the LAN, where it is undefined. Pure module: no SillyTavern imports.

const K = new Uint32Array([
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
]);

const encoder = new TextEncoder();
const W = new Uint32Array(64);

/**
 * SHA-256 of a byte array.
 * @param {Uint8Array} bytes
 * @returns {string} 64 lowercase hex characters
 */
export function sha256Bytes(bytes) {
    const bitLength = bytes.length * 8;
    // Message + 0x80 + zero padding + 64-bit big-endian length, rounded up to 64-byte blocks.
    const total = Math.ceil((bytes.length + 9) / 64) * 64;
    const buf = new Uint8Array(total);
    buf.set(bytes);
    buf[bytes.length] = 0x80;
    const view = new DataView(buf.buffer);
    // Lengths above 2^32 bits (512 MiB) need the high word.
    view.setUint32(total - 8, Math.floor(bitLength / 0x100000000));
    view.setUint32(total - 4, bitLength >>> 0);

    let h0 = 0x6a09e667, h1 = 0xbb67ae85, h2 = 0x3c6ef372, h3 = 0xa54ff53a;
    let h4 = 0x510e527f, h5 = 0x9b05688c, h6 = 0x1f83d9ab, h7 = 0x5be0cd19;

    for (let off = 0; off < total; off += 64) {
        for (let i = 0; i < 16; i++) W[i] = view.getUint32(off + i * 4);
        for (let i = 16; i < 64; i++) {
            const a = W[i - 15], b = W[i - 2];
            const s0 = ((a >>> 7) | (a << 25)) ^ ((a >>> 18) | (a << 14)) ^ (a >>> 3);
            const s1 = ((b >>> 17) | (b << 15)) ^ ((b >>> 19) | (b << 13)) ^ (b >>> 10);
            W[i] = (W[i - 16] + s0 + W[i - 7] + s1) | 0;
        }
        let a = h0, b = h1, c = h2, d = h3, e = h4, f = h5, g = h6, h = h7;
        for (let i = 0; i < 64; i++) {
            const S1 = ((e >>> 6) | (e << 26)) ^ ((e >>> 11) | (e << 21)) ^ ((e >>> 25) | (e << 7));
            const ch = (e & f) ^ (~e & g);
            const t1 = (h + S1 + ch + K[i] + W[i]) | 0;
            const S0 = ((a >>> 2) | (a << 30)) ^ ((a >>> 13) | (a << 19)) ^ ((a >>> 22) | (a << 10));
            const maj = (a & b) ^ (a & c) ^ (b & c);
            const t2 = (S0 + maj) | 0;
            h = g; g = f; f = e; e = (d + t1) | 0;
            d = c; c = b; b = a; a = (t1 + t2) | 0;
        }
        h0 = (h0 + a) | 0; h1 = (h1 + b) | 0; h2 = (h2 + c) | 0; h3 = (h3 + d) | 0;
        h4 = (h4 + e) | 0; h5 = (h5 + f) | 0; h6 = (h6 + g) | 0; h7 = (h7 + h) | 0;
    }
    return [h0, h1, h2, h3, h4, h5, h6, h7].map(x => (x >>> 0).toString(16).padStart(8, '0')).join('');
}

/**
 * SHA-256 of a string encoded as UTF-8 (as Python's `hashlib.sha256(s.encode("utf-8"))`).
 * @param {string} text
 * @returns {string} 64 lowercase hex characters
 */
export function sha256Hex(text) {
    return sha256Bytes(encoder.encode(text));
}

/**
 * Hash of one chat message: first 16 hex chars of sha256_utf8(role + "\n" + name + "\n" + text).
 * @param {string} role 'user' | 'assistant' | 'system'
 * @param {string} name the message's `name` ('' if missing)
 * @param {string} text the message's `mes`, exactly as in the chat
 * @returns {string}
 */
export function messageHash(role, name, text) {
    return sha256Hex(`${role}\n${name}\n${text}`).slice(0, 16);
}

/**
 * Prefix chain: chain(i) = first 16 hex chars of sha256_utf8(chain(i-1) + hash(i)); chain(-1) = ''.
 * @param {string} previousChain
 * @param {string} hash
 * @returns {string}
 */
export function chainHash(previousChain, hash) {
    return sha256Hex(previousChain + hash).slice(0, 16);
}

/**
 * The wire role of a SillyTavern chat message: `is_user` -> user, `is_system` -> system, else assistant.
 * @param {{is_user?: boolean, is_system?: boolean}} message
 * @returns {'user'|'assistant'|'system'}
 */
export function messageRole(message) {
    if (message?.is_user) return 'user';
    if (message?.is_system) return 'system';
    return 'assistant';
}

/**
 * Role, name and text of a SillyTavern chat message as the sidecar hashes them.
 * @param {object} message an element of `getContext().chat`
 * @returns {{role: string, name: string, text: string}}
 */
export function messageParts(message) {
    return {
        role: messageRole(message),
        name: typeof message?.name === 'string' ? message.name : '',
        text: typeof message?.mes === 'string' ? message.mes : String(message?.mes ?? ''),
    };
}
