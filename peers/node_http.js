// Peer for `berth lab`: Node's built-in `http` module, one process (Node's usual deployment
// unit), serving the lab's routes.
//
// Usage: node peers/node_http.js PORT
'use strict';
const http = require('http');

const HELLO = 'Hello, World!';
const SLOW_MS = 30; // berth's /test/slow job takes 30 ms

function send(res, status, type, body) {
  res.writeHead(status, { 'Content-Type': type, 'Content-Length': Buffer.byteLength(body) });
  res.end(body);
}

const server = http.createServer((req, res) => {
  if (req.method === 'GET' && (req.url === '/' || req.url === '/hello/world')) {
    send(res, 200, 'text/plain', HELLO);
  } else if (req.method === 'GET' && req.url === '/test/slow') {
    setTimeout(() => send(res, 200, 'text/plain', ''), SLOW_MS);
  } else if (req.method === 'POST' && req.url === '/reverse') {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      try {
        const data = JSON.parse(Buffer.concat(chunks).toString());
        const rev = Object.values(data).map((v) => [...v].reverse().join(''));
        send(res, 200, 'application/json', JSON.stringify({ data: rev }));
      } catch (e) {
        send(res, 400, 'text/plain', 'body must be a JSON object of strings\n');
      }
    });
  } else {
    send(res, 404, 'text/plain', 'Endpoint not found');
  }
});
// Keep idle keep-alive connections as long as the other servers do.
server.keepAliveTimeout = 60000;
server.listen(Number(process.argv[2]), '127.0.0.1', 1024, () => {
  console.log(`node listening on 127.0.0.1:${process.argv[2]}`);
});
