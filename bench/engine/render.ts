/**
 * `node dist/bench/engine/render.js bench/results/engine-<tag>.json`
 *
 * Re-renders the Markdown report and the SVG plots from a results JSON (e.g. after a
 * change to the report layout), without re-running the benchmark.
 */
import * as fs from 'fs';
import { Results, markdown, plotFor } from './report';

function main(): void {
  const file = process.argv[2];
  if (!file || !file.endsWith('.json')) {
    console.error('usage: node dist/bench/engine/render.js bench/results/engine-<tag>.json');
    process.exit(2);
  }
  const res = JSON.parse(fs.readFileSync(file, 'utf8')) as Results;
  res.loadAverageAtEnd ??= [];
  const stem = file.slice(0, -'.json'.length);
  fs.writeFileSync(`${stem}.md`, markdown(res));
  for (const d of res.datasets) {
    // A --scale run has one data set and one plot, named like its JSON.
    if (!d.skipped) fs.writeFileSync(res.scale ? `${stem}.svg` : `${stem}-${d.key}.svg`, plotFor(res, d));
  }
  console.log(`rendered ${stem}.md and its SVGs`);
}

main();
