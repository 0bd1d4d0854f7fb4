// node cluster echo server: the primary accepts (round-robin, Node's
// default on Linux) and hands each connection to one of 2 workers with
// SCM_RIGHTS; the workers echo (NODE_CLUSTER_SCHED_POLICY=none: the
// primary hands each worker the listener, and they accept from it).
// argv: PORT PORTFILE (written once both
// workers listen).  Runs until killed; workers die with the primary.
'use strict';
const cluster = require('cluster');
const net = require('net');
const fs = require('fs');
const port = parseInt(process.argv[2], 10);
if (cluster.isPrimary) {
  let up = 0;
  for (let i = 0; i < 2; i++) cluster.fork();
  cluster.on('listening', () => {
    if (++up === 2) fs.writeFileSync(process.argv[3], String(port));
  });
  process.on('SIGTERM', () => {
    for (const id in cluster.workers) cluster.workers[id].kill();
    process.exit(0);
  });
} else {
  process.on('disconnect', () => process.exit(0));
  net.createServer((s) => { s.on('error', () => {}); s.pipe(s); }).listen(port, '127.0.0.1');
}
