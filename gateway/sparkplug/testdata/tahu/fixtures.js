#!/usr/bin/env node
// fixtures.js: writes Sparkplug B payloads encoded by Eclipse Tahu's
// sparkplug-payload 1.0.3 (encodePayload, spBv1.0) into ../fixtures/*.bin,
// plus ../fixtures/fixtures.json listing, for each file, its topic type and
// the fields a decoder must find: timestamp (uint64 as a decimal string, or
// null when absent), seq and bdSeq (numbers, or null when absent), and the
// metrics (name, datatype code, alias, value: 64-bit values as decimal
// strings, DataSet/Template values as null).
// Timestamps are fixed, so the output is the same on every run. Each file is
// decoded again with decodePayload and checked against its manifest entry.
//
//   node gateway/sparkplug/testdata/tahu/fixtures.js
"use strict";

const fs = require("fs");
const path = require("path");
const spb = require("sparkplug-payload").get("spBv1.0");

const outDir = path.join(__dirname, "..", "fixtures");
const T = 1700000000000; // 2023-11-14T22:13:20Z, in ms

// Datatype codes of the Sparkplug B spec, for the manifest.
const TYPES = {
  Int8: 1, Int16: 2, Int32: 3, Int64: 4, UInt8: 5, UInt16: 6, UInt32: 7, UInt64: 8,
  Float: 9, Double: 10, Boolean: 11, String: 12, DateTime: 13, Text: 14, UUID: 15,
  DataSet: 16, Bytes: 17, File: 18, Template: 19,
};

const rebirthFalse = { name: "Node Control/Rebirth", alias: 1, type: "Boolean", value: false, timestamp: T };

const fixtures = [
  {
    name: "nbirth.bin", topicType: "NBIRTH",
    note: "bdSeq as Int64 (Java Tahu's choice), seq 0, one metric of each common kind",
    payload: {
      timestamp: T, seq: 0,
      metrics: [
        { name: "bdSeq", type: "Int64", value: 0 },
        rebirthFalse,
        { name: "Properties/Hardware", alias: 2, type: "String", value: "linemq-test", timestamp: T },
        { name: "Temperature", alias: 3, type: "Double", value: 21.5, timestamp: T },
        { name: "Offset", alias: 4, type: "Int32", value: -5, timestamp: T },
        { name: "Enabled", alias: 5, type: "Boolean", value: true, timestamp: T },
        { name: "Counter", alias: 6, type: "UInt64", value: "9007199254740993", timestamp: T },
        {
          name: "Table", alias: 7, type: "DataSet", timestamp: T,
          // Int64, not Int32: sparkplug-payload 1.0.3 cannot decode Int32 DataSet columns.
          value: { numOfColumns: 2, columns: ["id", "label"], types: ["Int64", "String"], rows: [[1, "one"], [2, "two"]] },
        },
        {
          name: "_types_/Motor", type: "Template", timestamp: T,
          value: { isDefinition: true, version: "1", metrics: [{ name: "RPM", type: "Int32", value: 0 }], parameters: [{ name: "Rated", type: "Double", value: 3.5 }] },
        },
        {
          name: "Motor1", alias: 8, type: "Template", timestamp: T,
          value: { isDefinition: false, templateRef: "Motor", metrics: [{ name: "RPM", type: "Int32", value: 1200 }] },
        },
      ],
    },
  },
  {
    name: "ndeath.bin", topicType: "NDEATH",
    note: "only bdSeq, as sparkplug-client's will: UInt64, no seq",
    payload: { timestamp: T - 1000, metrics: [{ name: "bdSeq", type: "UInt64", value: 0 }] },
  },
  {
    name: "ndeath_int64.bin", topicType: "NDEATH",
    note: "only bdSeq, Int64 as Java Tahu sends it, no seq",
    payload: { timestamp: T - 1000, metrics: [{ name: "bdSeq", type: "Int64", value: 0 }] },
  },
  {
    name: "dbirth.bin", topicType: "DBIRTH",
    payload: {
      timestamp: T + 1, seq: 1,
      metrics: [
        { name: "Temperature", alias: 10, type: "Double", value: 19.25, timestamp: T + 1 },
        { name: "Label", alias: 11, type: "String", value: "D1", timestamp: T + 1 },
        { name: "Count", alias: 12, type: "Int32", value: 0, timestamp: T + 1 },
      ],
    },
  },
  {
    name: "ddata_seq255.bin", topicType: "DDATA",
    note: "last seq before the wrap; metrics by alias only",
    payload: { timestamp: T + 2, seq: 255, metrics: [{ alias: 12, type: "Int32", value: 254, timestamp: T + 2 }] },
  },
  {
    name: "ddata_seq0.bin", topicType: "DDATA",
    note: "the message after ddata_seq255.bin: seq wrapped to 0",
    payload: { timestamp: T + 3, seq: 0, metrics: [{ alias: 12, type: "Int32", value: 255, timestamp: T + 3 }] },
  },
  {
    name: "ndata_noseq.bin", topicType: "NDATA",
    note: "seq absent (not valid Sparkplug, but a decoder must cope)",
    payload: { timestamp: T + 4, metrics: [{ name: "Temperature", type: "Double", value: 22, timestamp: T + 4 }] },
  },
  {
    name: "ddeath.bin", topicType: "DDEATH",
    payload: { timestamp: T + 5, seq: 7 },
  },
  {
    name: "ncmd_rebirth.bin", topicType: "NCMD",
    note: "what a host sends to ask for a rebirth; no seq",
    payload: { timestamp: T + 6, metrics: [{ name: "Node Control/Rebirth", type: "Boolean", value: true }] },
  },
  {
    name: "nbirth_bdseq200.bin", topicType: "NBIRTH",
    note: "bdSeq 200, UInt64 as sparkplug-client sends it (appended last)",
    payload: {
      timestamp: T + 7, seq: 0,
      metrics: [rebirthFalse, { name: "bdSeq", type: "UInt64", value: 200 }],
    },
  },
  {
    name: "nometrics.bin", topicType: "NDATA",
    note: "no metrics at all",
    payload: { timestamp: T + 8, seq: 9 },
  },
  {
    name: "empty.bin", topicType: "NDATA",
    note: "zero bytes: no timestamp, no seq, no metrics",
    payload: {},
  },
  {
    name: "ndata_maxts.bin", topicType: "NDATA",
    note: "timestamp 2^64-1: needs a full uint64",
    payload: { timestamp: "18446744073709551615", seq: 3, metrics: [{ alias: 3, type: "Double", value: 0.5 }] },
  },
];

// A value as the manifest shows it. 64-bit fields may be numbers, strings or
// (once decoded) Long objects; String() gives the decimal digits of each.
function shown(type, value) {
  if (value === null || value === undefined) return null;
  if (type === "DataSet" || type === "Template") return null;
  if (["Int64", "UInt64", "UInt32", "DateTime"].includes(type)) return String(value);
  return value;
}

function opt(v) {
  return v === undefined || v === null ? null : v;
}

function num(v) {
  return v === undefined || v === null ? null : Number(String(v));
}

// What the manifest says a payload holds, from the input or a decoded copy.
function expected(p) {
  const metrics = (p.metrics || []).map((m) => ({
    name: opt(m.name),
    datatype: TYPES[m.type],
    alias: num(m.alias),
    value: shown(m.type, m.value),
  }));
  const bd = metrics.find((m) => m.name === "bdSeq");
  return {
    timestamp: p.timestamp === undefined ? null : String(p.timestamp),
    seq: num(p.seq),
    bdSeq: bd ? num(bd.value) : null,
    bdSeqDatatype: bd ? bd.datatype : null,
    metrics,
  };
}

fs.mkdirSync(outDir, { recursive: true });
const manifest = [];
for (const f of fixtures) {
  const bytes = Buffer.from(spb.encodePayload(f.payload));
  fs.writeFileSync(path.join(outDir, f.name), bytes);
  const want = expected(f.payload);
  const got = expected(spb.decodePayload(bytes));
  if (JSON.stringify(want) !== JSON.stringify(got)) {
    console.error(`${f.name}: decoded payload differs\n want ${JSON.stringify(want)}\n got  ${JSON.stringify(got)}`);
    process.exit(1);
  }
  manifest.push({ name: f.name, topicType: f.topicType, note: f.note || null, size: bytes.length, ...want });
}
// One line per field and per metric, so that diffs stay readable.
const text = manifest.map((entry) => {
  const { metrics, ...fields } = entry;
  const lines = Object.entries(fields).map(([k, v]) => `    ${JSON.stringify(k)}: ${JSON.stringify(v)},`);
  const ms = metrics.map((m) => "      " + JSON.stringify(m)).join(",\n");
  return `  {\n${lines.join("\n")}\n    "metrics": [${ms ? "\n" + ms + "\n    " : ""}]\n  }`;
});
fs.writeFileSync(path.join(outDir, "fixtures.json"), "[\n" + text.join(",\n") + "\n]\n");
console.log(`wrote ${manifest.length} fixtures and fixtures.json to ${outDir}`);
