/**
 * What waking a sleeping thread costs on this machine: two threads pass a turn back and
 * forth, once sleeping between turns (Atomics.wait / Atomics.notify, a futex each way,
 * as a libuv pool thread waits for work and the event loop waits in epoll) and once
 * spinning (no sleep: what the handover itself costs). Prints the round trip and the
 * CPU per wake-up, user and system, from process.cpuUsage over both threads.
 *
 *   node dist/bench/engine/wake-cost.js [--rounds 50000]
 *
 * Why it matters: every awaited search that takes the hop wakes a pool thread and is
 * woken back; a REST query over loopback also wakes the server and then the client.
 * Prints only; nothing is written.
 */
import { Worker, isMainThread, parentPort, workerData } from 'worker_threads';

interface Job {
  shared: SharedArrayBuffer;
  rounds: number;
  sleep: boolean;
}

// Slot 0: the turn counter; odd = the worker's turn, even = the main thread's.
function worker(job: Job): void {
  const turn = new Int32Array(job.shared);
  for (let i = 0; i < job.rounds; i++) {
    const mine = 2 * i + 1;
    while (Atomics.load(turn, 0) !== mine) {
      if (job.sleep) Atomics.wait(turn, 0, mine - 1);
    }
    Atomics.store(turn, 0, mine + 1);
    if (job.sleep) Atomics.notify(turn, 0);
  }
}

async function run(rounds: number, sleep: boolean): Promise<{ roundTripUs: number; cpuUsPerWake: number; sysUsPerWake: number }> {
  const shared = new SharedArrayBuffer(4);
  const turn = new Int32Array(shared);
  const w = new Worker(__filename, { workerData: { shared, rounds, sleep } satisfies Job });
  // A worker that fails to start would leave the loop below waiting for ever.
  await new Promise((resolve, reject) => {
    w.once('online', resolve);
    w.once('error', reject);
  });
  const cpu0 = process.cpuUsage();
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < rounds; i++) {
    Atomics.store(turn, 0, 2 * i + 1);
    if (sleep) Atomics.notify(turn, 0);
    while (Atomics.load(turn, 0) !== 2 * i + 2) {
      if (sleep) Atomics.wait(turn, 0, 2 * i + 1);
    }
  }
  const us = Number(process.hrtime.bigint() - t0) / 1e3;
  const cpu = process.cpuUsage(cpu0);
  await new Promise((resolve) => w.once('exit', resolve));
  const wakes = 2 * rounds;
  return { roundTripUs: us / rounds, cpuUsPerWake: (cpu.user + cpu.system) / wakes, sysUsPerWake: cpu.system / wakes };
}

async function main(): Promise<void> {
  const i = process.argv.indexOf('--rounds');
  const rounds = i < 0 ? 50_000 : Number(process.argv[i + 1]);
  if (!Number.isInteger(rounds) || rounds < 1) throw new Error('--rounds: a positive integer');
  // Spinning, the CPU per hand-over is both threads' busy waiting, not a hand-over's own cost.
  for (const sleep of [true, false, true, false]) {
    const r = await run(rounds, sleep);
    console.log(
      `${sleep ? 'sleeping (futex)' : 'spinning        '}: round trip ${r.roundTripUs.toFixed(2)} µs; CPU per hand-over ${r.cpuUsPerWake.toFixed(2)} µs (system ${r.sysUsPerWake.toFixed(2)} µs)`,
    );
  }
}

if (isMainThread) {
  main().catch((err) => {
    console.error(err);
    process.exit(1);
  });
} else {
  worker(workerData as Job);
  parentPort?.close();
}
