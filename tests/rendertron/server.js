// A small Express app behind the real rendertron-middleware, pointed at snapshotd.
// Env: SNAPSHOTD_RENDER_URL (".../_snapshotd/render"). Rendertron's middleware sends no
// token: snapshotd lets it in by its address (server.render_clients). Listens on
// 127.0.0.1, port 0, and prints {"port": N} once it does.
"use strict";

const express = require("express");
const rendertron = require("rendertron-middleware");

const app = express();
app.use(rendertron.makeMiddleware({ proxyUrl: process.env.SNAPSHOTD_RENDER_URL }));
app.get("*", (req, res) => {
  res.type("html").send("<!doctype html><html><body><div id=app>express shell</div></body></html>");
});

const server = app.listen(0, "127.0.0.1", () => {
  console.log(JSON.stringify({ port: server.address().port }));
});
process.on("SIGTERM", () => server.close(() => process.exit(0)));
