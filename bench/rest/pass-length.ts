/**
 * How much the length of a timed pass moves a best-of-N figure on this machine.
 *
 * bench:rest compares the best of three wrk passes (2 s each) with the best of three
 * in-process engine passes. The engine's passes used to be one cycle over the 1000
 * queries (about 70 ms at ef 64). On a shared VM whose speed moves by tens of percent
 * within seconds, the best of three short passes picks a fast moment that a 2 s pass
 * averages away. This measures that on one index: rounds of three one-cycle passes and
 * three passes of `--seconds`, interleaved, and prints both bests and their ratio.
 *
 *   node dist/bench/rest/pass-length.js [--rounds 6] [--seconds 2] [--ef 64] [--outstanding 2]
 *
 * Prints only; nothing is written.
 */
import { loadEngine } from '../../bindings';
import { EF_CONSTRUCT, K, M, numberFlag as flag, parseArgs, splitRows } from '../engine/common';
import { loadDataset } from '../engine/datasets';
import { runConcurrent } from './client';

async function main(): Promise<void> {
  const argv = process.argv.slice(2);
  const rounds = Math.floor(flag(argv, '--rounds', 6, 1));
  const seconds = flag(argv, '--seconds', 2, 0);
  const ef = Math.floor(flag(argv, '--ef', 64, 1));
  const outstanding = Math.floor(flag(argv, '--outstanding', 2, 1));
  const ds = loadDataset('synthetic', parseArgs([]));
  if ('skipped' in ds) throw new Error(`synthetic data set: ${ds.skipped}`);
  const index = loadEngine({ backend: 'native' }).createIndex({ dim: ds.dim, distance: 'Cosine', m: M, efConstruct: EF_CONSTRUCT, seed: 42 });
  await index.add(BigUint64Array.from({ length: ds.nBase }, (_, i) => BigInt(i)), ds.base, 2);
  const rows = splitRows(ds.queries, ds.dim);
  // Whole cycles over the queries until `s` seconds have passed (one cycle at 0): QPS.
  const pass = async (s: number): Promise<number> => {
    let n = 0;
    let spent = 0;
    do {
      const t = await runConcurrent(rows.length, outstanding, async (i) => {
        await index.search(rows[i], { k: K, ef });
      });
      n += rows.length;
      spent += t.seconds;
    } while (spent < s);
    return n / spent;
  };
  for (let w = 0; w < 3; w++) await pass(0);
  console.log(`synthetic 100k x ${ds.dim}, ef ${ef}, ${outstanding} outstanding: best of 3 one-cycle passes against best of 3 passes of ${seconds} s, interleaved`);
  const ratios: number[] = [];
  for (let r = 0; r < rounds; r++) {
    const short: number[] = [];
    const long: number[] = [];
    for (let i = 0; i < 3; i++) {
      short.push(await pass(0));
      long.push(await pass(seconds));
    }
    const ratio = Math.max(...short) / Math.max(...long);
    ratios.push(ratio);
    console.log(`  round ${r + 1}: one cycle ${Math.round(Math.max(...short))} [${short.map(Math.round).join(', ')}], ${seconds} s ${Math.round(Math.max(...long))} [${long.map(Math.round).join(', ')}]: ratio ${ratio.toFixed(3)}`);
  }
  ratios.sort((a, b) => a - b);
  console.log(`ratio one cycle / ${seconds} s: min ${ratios[0].toFixed(3)}, median ${ratios[Math.floor(ratios.length / 2)].toFixed(3)}, max ${ratios[ratios.length - 1].toFixed(3)}`);
  index.close();
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
