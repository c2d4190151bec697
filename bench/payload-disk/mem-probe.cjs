// Loaded into the benchmarked server with `node --require` (bench/payload-disk/run.ts):
// writes the server's process.memoryUsage() as JSON to memory.json in its working
// directory (the bench server's temp dir) every 500 ms, so the bench can report heap
// and external memory beside RSS. Bench only.
'use strict';
const fs = require('node:fs');
const path = require('node:path');
const file = path.join(process.cwd(), 'memory.json');
setInterval(() => {
  fs.writeFileSync(`${file}.tmp`, JSON.stringify(process.memoryUsage()));
  fs.renameSync(`${file}.tmp`, file);
}, 500).unref();
