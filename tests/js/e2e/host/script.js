// ST 1.12.6 serves public/script.js at /script.js; `generateRaw` is one of its exports (script.js:3262) and
// not on getContext(). Re-exporting from the stand-in keeps one module instance, as the browser does for ST.
export { generateRaw } from '/host/st-host.js';
