/** The command line of bin/quiver, parsed without starting anything. */

import test from 'ava';

import { UsageError, parseArgs, unavailableFlags } from '../../ts/api/cli/args';

test('no flags: defaults', (t) => {
  const args = parseArgs([]);
  t.is(args.configPath, null);
  t.deepEqual(args.snapshots, []);
  t.false(args.forceSnapshot);
  t.deepEqual(unavailableFlags(args), []);
});

test('--config-path takes a value, with a space or an equals sign', (t) => {
  t.is(parseArgs(['--config-path', 'prod.yaml']).configPath, 'prod.yaml');
  t.is(parseArgs(['--config-path=prod.yaml']).configPath, 'prod.yaml');
});

test('--snapshot is repeatable and splits at the last colon', (t) => {
  const args = parseArgs(['--snapshot', 'C:/backups/a.snapshot:books', '--snapshot=b.snapshot:films', '--force_snapshot']);
  t.deepEqual(args.snapshots, [
    { path: 'C:/backups/a.snapshot', collection: 'books' },
    { path: 'b.snapshot', collection: 'films' },
  ]);
  t.true(args.forceSnapshot);
  // Implemented since the snapshots issue: nothing to refuse.
  t.deepEqual(unavailableFlags(args), []);
});

test('usage errors: unknown flag, missing value, stray argument, bad snapshot spec', (t) => {
  t.throws(() => parseArgs(['--bogus']), { instanceOf: UsageError, message: /unknown option --bogus/ });
  t.throws(() => parseArgs(['--uri']), { instanceOf: UsageError, message: /--uri needs a value/ });
  t.throws(() => parseArgs(['--uri', '--bootstrap', 'x']), { instanceOf: UsageError, message: /--uri needs a value/ });
  t.throws(() => parseArgs(['serve']), { instanceOf: UsageError, message: /unexpected argument/ });
  t.throws(() => parseArgs(['--snapshot', 'no-collection']), { instanceOf: UsageError, message: /<path>:<collection>/ });
  t.throws(() => parseArgs(['--help=yes']), { instanceOf: UsageError });
});
