// An Express app with a prerender middleware installed in it, the app being the very origin
// snapshotd renders. Env: MIDDLEWARE ("prerender-node", "connect-s4a" or
// "rendertron-middleware"), NODE_MODULES (the folder holding it and express), SERVICE_URL
// (the service's address, as its users set it), TOKEN (prerender-node's token, connect-s4a's
// site token). Every page shows the User-Agent header its request carried and, once its script
// ran, the user agent the page saw. Listens on 127.0.0.1, port PORT (0: any), and prints
// {"port": N}.
"use strict";

const path = require("path");
const { createRequire } = require("module");

const load = createRequire(path.join(process.env.NODE_MODULES, "index.js"));
const express = load("express");
const name = process.env.MIDDLEWARE;
const service = process.env.SERVICE_URL;

const app = express();
if (name === "prerender-node") {
  app.use(load("prerender-node").set("prerenderServiceUrl", service)
    .set("prerenderToken", process.env.TOKEN));
} else if (name === "connect-s4a") {
  app.use(load("connect-s4a")(process.env.TOKEN, { apiEndPoint: service }));
} else if (name === "rendertron-middleware") {
  app.use(load("rendertron-middleware").makeMiddleware({ proxyUrl: service }));
} else {
  throw new Error(`unknown middleware ${name}`);
}

const escape = (text) => String(text).replace(/[&<>"]/g, (c) => `&#${c.charCodeAt(0)};`);

app.get("*", (req, res) => {
  res.type("html").send(
    "<!doctype html><html><head><title>In the app</title></head><body>" +
    `<p id=header>header: ${escape(req.headers["user-agent"] || "")}</p>` +
    "<div id=app>express shell</div>" +
    "<script>document.getElementById('app').textContent = 'page: ' + navigator.userAgent;" +
    "</script></body></html>",
  );
});

const server = app.listen(Number(process.env.PORT || 0), "127.0.0.1", () => {
  console.log(JSON.stringify({ port: server.address().port }));
});
process.on("SIGTERM", () => server.close(() => process.exit(0)));
