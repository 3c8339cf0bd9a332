#!/usr/bin/env node
// edge.js: an independent Sparkplug B edge node for linemq's gateway/sparkplug
// tests, built on Eclipse Tahu's Node.js client (sparkplug-client 3.2.4), so
// the broker is checked against a third-party implementation, not our own.
//
//   node edge.js --url mqtt://127.0.0.1:PORT --group G --edge E --device D \
//                --data N [--client-id ID]
//
// On connect sparkplug-client has already registered the NDEATH will (bdSeq 0)
// and subscribed to spBv1.0/G/NCMD/E/# and spBv1.0/G/DCMD/E/#. This script then
// publishes NBIRTH (seq 0, the library appends bdSeq), DBIRTH for device D,
// N DDATA for D and one NDATA, and prints one JSON line per step on stdout:
//   {"event":"nbirth",...} {"event":"dbirth",...} {"event":"data","n":N,...}
//   {"event":"ready"}
// "ready" is printed once the broker has acknowledged a SUBSCRIBE sent after
// all of those publishes, so it has read them and the NCMD subscription is in
// place. The node then idles until killed; SIGKILL drops the connection
// without DISCONNECT, so the broker publishes the NDEATH will.
// An NCMD with "Node Control/Rebirth" = true republishes NBIRTH and DBIRTH
// (printing nbirth, dbirth, then {"event":"rebirth"}). Should the connection
// drop, mqtt.js reconnects and the births are published again (same bdSeq).
// Errors print {"event":"error","msg":...}; a failed first connection exits 1.
"use strict";

const sparkplug = require("sparkplug-client");

function parseArgs(argv) {
  const opts = {};
  for (let i = 0; i < argv.length; i += 2) {
    const key = argv[i], val = argv[i + 1];
    if (!key.startsWith("--") || val === undefined) fail("bad argument: " + key);
    opts[key.slice(2)] = val;
  }
  for (const k of ["url", "group", "edge", "device", "data"]) {
    if (opts[k] === undefined) fail("missing --" + k);
  }
  opts.data = Number(opts.data);
  if (!Number.isInteger(opts.data) || opts.data < 0) fail("--data must be a count");
  return opts;
}

function emit(obj) {
  process.stdout.write(JSON.stringify(obj) + "\n");
}

function fail(msg) {
  emit({ event: "error", msg: String(msg) });
  process.exit(1);
}

const opts = parseArgs(process.argv.slice(2));
const clientId = opts["client-id"] || `tahu-${opts.edge}-${process.pid}`;

const client = sparkplug.newClient({
  serverUrl: opts.url,
  username: null, // required keys; null means "not sent" in the CONNECT
  password: null,
  groupId: opts.group,
  edgeNode: opts.edge,
  clientId: clientId,
  version: "spBv1.0",
});

let count = 0; // the device's Count metric, bumped by each DDATA
const started = Date.now();

function publishBirths() {
  const now = Date.now();
  const nbirth = {
    timestamp: now,
    metrics: [
      { name: "Node Control/Rebirth", type: "Boolean", value: false, timestamp: now },
      { name: "Properties/Hardware", type: "String", value: "linemq-test", timestamp: now },
      { name: "Uptime", type: "UInt64", value: now - started, timestamp: now },
    ],
  };
  client.publishNodeBirth(nbirth); // sets seq 0 and appends the bdSeq metric
  const bdSeq = nbirth.metrics.find((m) => m.name === "bdSeq").value;
  emit({ event: "nbirth", seq: nbirth.seq, bdSeq: bdSeq });

  const dbirth = {
    timestamp: now,
    metrics: [
      { name: "Temperature", type: "Double", value: 21.5, timestamp: now },
      { name: "Count", type: "Int32", value: count, timestamp: now },
      { name: "Label", type: "String", value: opts.device, timestamp: now },
    ],
  };
  client.publishDeviceBirth(opts.device, dbirth);
  emit({ event: "dbirth", seq: dbirth.seq });
}

function publishData() {
  let seq = null;
  for (let i = 0; i < opts.data; i++) {
    const now = Date.now();
    count++;
    const ddata = {
      timestamp: now,
      metrics: [
        { name: "Count", type: "Int32", value: count, timestamp: now },
        { name: "Temperature", type: "Double", value: 21.5 + count / 10, timestamp: now },
      ],
    };
    client.publishDeviceData(opts.device, ddata);
    seq = ddata.seq;
  }
  const now = Date.now();
  const ndata = {
    timestamp: now,
    metrics: [{ name: "Uptime", type: "UInt64", value: now - started, timestamp: now }],
  };
  client.publishNodeData(ndata);
  emit({ event: "data", n: opts.data, lastDdataSeq: seq, ndataSeq: ndata.seq });
}

let born = false;
client.on("birth", () => {
  publishBirths();
  if (born) return; // a reconnect: births only
  born = true;
  publishData();
  // SUBACKs come back in order, after the broker has handled the publishes.
  client.subscribeTopic(`spBv1.0/${opts.group}/NCMD/${opts.edge}/#`, { qos: 0 }, (err) => {
    if (err) fail(err.message || err);
    emit({ event: "ready" });
  });
});

client.on("ncmd", (payload) => {
  const rebirth = (payload.metrics || []).find((m) => m.name === "Node Control/Rebirth");
  if (rebirth && rebirth.value === true) {
    publishBirths();
    emit({ event: "rebirth" });
  }
});

// sparkplug-client only emits "error" before the first CONNACK (and then ends
// the MQTT client), so an error here means the connection failed.
client.on("error", (err) => fail(err && err.message ? err.message : err));
client.on("close", () => emit({ event: "close" }));
client.on("reconnect", () => emit({ event: "reconnect" }));

const connectTimeout = setTimeout(() => fail("no CONNACK within 15s"), 15000);
client.on("connect", () => clearTimeout(connectTimeout));
