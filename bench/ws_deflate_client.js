// Load for bench/ws_deflate.py (issue 34): Node's `ws` as a client that offers
// permessage-deflate (as browsers do) and compresses every message it sends, over CONNS
// connections, each with one message in flight (send, wait for the echo, check it, send the
// next) for SECONDS. Prints one JSON line: messages echoed, per second, what was agreed, and
// errors. berth msg bench offers no compression, hence this client.
//
// Usage: node bench/ws_deflate_client.js URL SIZE CONNS SECONDS   (NODE_PATH with `ws`)
const WebSocket = require("ws");

const [url, size, conns, seconds] = [
  process.argv[2],
  Number(process.argv[3]),
  Number(process.argv[4]),
  Number(process.argv[5]),
];

// Text: 64 B of words, or JSON-like records up to SIZE bytes (what a chat or a dashboard
// sends), the same bytes for every server.
function payload(n) {
  if (n <= 64) return "hello berth, hello ws, hello websockets: a small text message!!!".slice(0, n);
  let s = "[";
  for (let i = 0; s.length < n - 80; i++) {
    s += JSON.stringify({ id: i, name: `item ${i}`, price: (i * 7919) % 1000, tags: ["a", "b"] }) + ",";
  }
  s += JSON.stringify({ end: true }) + "]";
  return s.padEnd(n, " ");
}

const message = payload(size);
let echoed = 0;
let errors = 0;
let extensions = null;
let stop = false;
let open = 0;
const sockets = [];

for (let i = 0; i < conns; i++) {
  const ws = new WebSocket(url, {
    // Compress every message (threshold 0), level 1, as the servers do.
    perMessageDeflate: { threshold: 0, zlibDeflateOptions: { level: 1 } },
    maxPayload: 64 << 20,
  });
  sockets.push(ws);
  ws.on("upgrade", (res) => {
    extensions = extensions || res.headers["sec-websocket-extensions"] || "none";
  });
  ws.on("open", () => {
    open++;
    ws.send(message);
  });
  ws.on("message", (data, isBinary) => {
    if (isBinary || data.toString() !== message) errors++;
    else echoed++;
    if (!stop) ws.send(message);
  });
  ws.on("error", () => errors++);
}

const start = Date.now();
setTimeout(() => {
  stop = true;
  const took = (Date.now() - start) / 1000;
  console.log(JSON.stringify({ messages: echoed, msgs_per_sec: echoed / took, open, errors, extensions }));
  for (const ws of sockets) ws.terminate();
  process.exit(0);
}, seconds * 1000);
