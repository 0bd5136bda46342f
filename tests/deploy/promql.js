// Parses PromQL expressions with Prometheus's own grammar (@prometheus-io/lezer-promql, the
// parser of Prometheus's web UI) and prints, for each, the errors it found: the syntax
// nodes the parser had to insert or skip.
//   node promql.js '<json list of expressions>'
"use strict";

const { parser } = require("@prometheus-io/lezer-promql");

const out = JSON.parse(process.argv[2]).map((expr) => {
  const errors = [];
  parser.parse(expr).iterate({
    enter(node) {
      if (node.type.isError) errors.push(`at ${node.from}: ${JSON.stringify(expr.slice(node.from, node.from + 20))}`);
    },
  });
  return { expr, errors };
});
console.log(JSON.stringify(out));
