/**
 * The command line of `bin/quiver`, parsed into a plain object.
 *
 * Owns: the flags, their usage text and what counts as a usage error. Must never: act
 * on a flag, print or exit (main.ts does).
 */

export interface SnapshotToRecover {
  path: string;
  collection: string;
}

export interface CliArgs {
  configPath: string | null;
  /** This peer's own URI (cluster mode). */
  uri: string | null;
  /** URI of a peer to join (cluster mode). */
  bootstrap: string | null;
  snapshots: SnapshotToRecover[];
  forceSnapshot: boolean;
  storageSnapshot: string | null;
  help: boolean;
}

export const USAGE = `Usage: quiver [options]
       quiver drain [--url <URL>] [--peer <id>] [--api-key <key>] [--timeout <s>]
                    (moves every replica off a peer; quiver drain --help)

Starts a Quiver node. The REST API listens on service.host:service.http_port (6333).

Options:
  --config-path <file>           configuration file applied over config/config.yaml
                                 (SERVICE__SECTION__KEY environment variables still win)
  --uri <uri>                    this peer's URI for other peers (cluster mode)
  --bootstrap <uri>              URI of a running peer to join (cluster mode)
  --snapshot <path>:<collection> recover a collection from a snapshot at start (repeatable)
  --force_snapshot               let --snapshot replace a collection that already exists
  --storage-snapshot <path>      recover the whole storage from a full snapshot at start
  --help                         print this text and exit
`;

export class UsageError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'UsageError';
  }
}

const VALUE_FLAGS = new Set(['--config-path', '--uri', '--bootstrap', '--snapshot', '--storage-snapshot']);
const BOOLEAN_FLAGS = new Set(['--force_snapshot', '--help']);

export function parseArgs(argv: readonly string[]): CliArgs {
  const args: CliArgs = {
    configPath: null,
    uri: null,
    bootstrap: null,
    snapshots: [],
    forceSnapshot: false,
    storageSnapshot: null,
    help: false,
  };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    const eq = arg.startsWith('--') ? arg.indexOf('=') : -1;
    const flag = eq === -1 ? arg : arg.slice(0, eq);

    if (BOOLEAN_FLAGS.has(flag)) {
      if (eq !== -1) throw new UsageError(`${flag} takes no value`);
      if (flag === '--help') args.help = true;
      else args.forceSnapshot = true;
      continue;
    }
    if (!VALUE_FLAGS.has(flag)) {
      throw new UsageError(arg.startsWith('-') ? `unknown option ${flag}` : `unexpected argument ${JSON.stringify(arg)}`);
    }

    let value: string;
    if (eq !== -1) {
      value = arg.slice(eq + 1);
    } else {
      const next = argv[i + 1];
      if (next === undefined || next.startsWith('--')) throw new UsageError(`${flag} needs a value`);
      value = next;
      i++;
    }
    if (value === '') throw new UsageError(`${flag} needs a value`);

    switch (flag) {
      case '--config-path':
        args.configPath = value;
        break;
      case '--uri':
        args.uri = value;
        break;
      case '--bootstrap':
        args.bootstrap = value;
        break;
      case '--storage-snapshot':
        args.storageSnapshot = value;
        break;
      case '--snapshot':
        args.snapshots.push(parseSnapshot(value));
        break;
    }
  }
  return args;
}

/** `<path>:<collection>`; the path may itself hold colons, the collection name may not. */
function parseSnapshot(value: string): SnapshotToRecover {
  const colon = value.lastIndexOf(':');
  const path = colon === -1 ? '' : value.slice(0, colon);
  const collection = colon === -1 ? '' : value.slice(colon + 1);
  if (path === '' || collection === '') {
    throw new UsageError(`--snapshot expects <path>:<collection>, got ${JSON.stringify(value)}`);
  }
  return { path, collection };
}

/** Problems with flag values that parsing alone does not catch (peer URIs), one line each. */
export function unavailableFlags(args: CliArgs): string[] {
  const out: string[] = [];
  for (const [flag, value] of [['--uri', args.uri], ['--bootstrap', args.bootstrap]] as const) {
    if (value === null) continue;
    try {
      const u = new URL(value);
      if ((u.protocol !== 'http:' && u.protocol !== 'https:') || u.port === '') throw new Error('bad');
    } catch {
      out.push(`${flag} expects a peer URI such as http://10.0.0.1:6335 (scheme, host and the p2p port), got ${JSON.stringify(value)}`);
    }
  }
  return out;
}
