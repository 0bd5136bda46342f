// The prerender server (npm "prerender"), as its README runs it, for bench/bench_readiness.py:
// on loopback only, with the Chromium and flags the bench gives it.
const prerender = require("prerender");

const server = prerender({
  port: Number(process.env.PORT),
  host: "127.0.0.1",
  chromeLocation: process.env.CHROME,
  chromeFlags: JSON.parse(process.env.CHROME_FLAGS),
  browserDebuggingPort: Number(process.env.DEBUG_PORT),
  pageLoadTimeout: Number(process.env.PAGE_LOAD_TIMEOUT || 20000),
  logRequests: false,
});
server.use(prerender.removeScriptTags());
server.start();
