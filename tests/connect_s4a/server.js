// A small Express app behind SEO4Ajax's real connect-s4a middleware, pointed at snapshotd's
// SEO4Ajax-compatible face the way a switcher points it: only apiEndPoint changes.
// Env: S4A_API_END_POINT ("http://127.0.0.1:PORT/"), S4A_SITE_TOKEN. Listens on 127.0.0.1,
// port 0, and prints {"port": N} once it does.
"use strict";

const express = require("express");
const connectS4a = require("connect-s4a");

const app = express();
app.use(connectS4a(process.env.S4A_SITE_TOKEN, { apiEndPoint: process.env.S4A_API_END_POINT }));
app.get("*", (req, res) => {
  res.type("html").send("<!doctype html><html><body><div id=app>express shell</div></body></html>");
});

const server = app.listen(0, "127.0.0.1", () => {
  console.log(JSON.stringify({ port: server.address().port }));
});
process.on("SIGTERM", () => server.close(() => process.exit(0)));
