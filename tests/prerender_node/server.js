// A small Express app behind the real prerender-node middleware, pointed at snapshotd.
// Env: SNAPSHOTD_RENDER_URL (".../_snapshotd/render/"), PRERENDER_TOKEN. Listens on
// 127.0.0.1, port 0, and prints {"port": N} once it does.
"use strict";

const express = require("express");
const prerender = require("prerender-node");

const app = express();
app.use(
  prerender
    .set("prerenderServiceUrl", process.env.SNAPSHOTD_RENDER_URL)
    .set("prerenderToken", process.env.PRERENDER_TOKEN),
);
app.get("*", (req, res) => {
  res.type("html").send("<!doctype html><html><body><div id=app>express shell</div></body></html>");
});

const server = app.listen(0, "127.0.0.1", () => {
  console.log(JSON.stringify({ port: server.address().port }));
});
process.on("SIGTERM", () => server.close(() => process.exit(0)));
