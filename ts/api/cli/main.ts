/**
 * What `bin/quiver` does: parse the command line, load the configuration, start the
 * node, and shut it down gracefully on SIGTERM or SIGINT.
 *
 * Exit codes: 0 after a graceful shutdown (or --help), 2 for a usage error, a flag
 * whose feature is not implemented yet, or invalid configuration, 1 when the node
 * cannot start (port in use, TLS asked for).
 *
 * Owns: process exit codes, signal handling and the start-up log. Must never: hold
 * service behaviour (ts/node.ts and ts/api/rest do).
 */

import pino from 'pino';

import { ConfigError, loadConfig, redactConfig } from '../../config';
import type { Config } from '../../config/types';
import { StartupError, startNode, type RunningNode } from '../../node';
import { USAGE, UsageError, parseArgs, unavailableFlags, type CliArgs } from './args';
import { drainMain } from './drain';
import { IdleGc, fullGc } from './idle-gc';
import { TurnBatchedSink } from './log-sink';

export const EXIT_USAGE = 2;
export const EXIT_START_FAILED = 1;

export async function main(argv: readonly string[]): Promise<void> {
  // `quiver drain ...`: a client command, no node is started (ts/api/cli/drain.ts).
  if (argv[0] === 'drain') return drainMain(argv.slice(1));
  let args: CliArgs;
  try {
    args = parseArgs(argv);
  } catch (err) {
    if (!(err instanceof UsageError)) throw err;
    process.stderr.write(`quiver: ${err.message}\n\n${USAGE}\n`);
    process.exit(EXIT_USAGE);
  }
  if (args.help) {
    process.stdout.write(`${USAGE}\n`);
    process.exit(0);
  }

  const unavailable = unavailableFlags(args);
  if (unavailable.length > 0) {
    for (const line of unavailable) process.stderr.write(`quiver: ${line}\n`);
    process.exit(EXIT_USAGE);
  }

  let config: Config;
  try {
    config = loadConfig({ configPath: args.configPath, env: process.env, cwd: process.cwd() });
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    process.stderr.write(`quiver: ${err.message}\n`);
    process.exit(EXIT_USAGE);
  }

  // Synchronous writes, the lines of one event-loop turn in one write(2): lines keep
  // their order and none is lost when the process exits (an asynchronous destination was
  // tried: at exit a write still in flight came out after the buffered lines, or could
  // be lost). See log-sink.ts.
  const logger = pino({ name: 'quiver', level: config.log_level.toLowerCase(), timestamp: pino.stdTimeFunctions.isoTime }, new TurnBatchedSink(1));
  logger.info({ config: redactConfig(config), configPath: args.configPath }, 'configuration loaded');

  // Handlers go in before the port opens: a signal that arrives while starting must
  // not kill the process the default way, it shuts the node down once it is up.
  let node: RunningNode | null = null;
  let stopSignal: NodeJS.Signals | null = null;
  const shutDown = (running: RunningNode, signal: NodeJS.Signals) => {
    logger.info({ signal }, 'shutting down: no new connections, finishing requests in flight');
    running.close().then(
      () => {
        logger.info('shutdown complete');
        process.exit(0);
      },
      (err: unknown) => {
        logger.error({ err }, 'shutdown failed');
        process.exit(EXIT_START_FAILED);
      },
    );
  };
  const onSignal = (signal: NodeJS.Signals) => {
    if (stopSignal !== null) {
      logger.warn({ signal }, 'second signal during shutdown: exiting now');
      process.exit(EXIT_START_FAILED);
    }
    stopSignal = signal;
    if (node !== null) shutDown(node, signal);
  };
  process.on('SIGTERM', onSignal);
  process.on('SIGINT', onSignal);

  try {
    node = await startNode(config, logger, {
      restore: { snapshots: args.snapshots, force: args.forceSnapshot, storageSnapshot: args.storageSnapshot },
      uri: args.uri,
      bootstrap: args.bootstrap,
    });
  } catch (err) {
    logger.fatal({ err }, 'the node could not start');
    if (err instanceof StartupError) process.stderr.write(`quiver: ${err.message}\n`);
    process.exit(EXIT_START_FAILED);
  }
  if (node.grpcPort !== null) {
    logger.info({ host: node.host, port: node.grpcPort, tls: config.service.enable_tls }, 'gRPC API listening');
  }
  logger.info(
    { host: node.host, port: node.port, address: `${config.service.enable_tls ? 'https' : 'http'}://${node.host}:${node.port}` },
    'REST API listening',
  );
  // After a burst (a bulk load), give the heap's high-water mark back once the process
  // is quiet (ts/api/cli/idle-gc.ts, docs/storage.md "Memory after a burst").
  const gc = fullGc();
  if (gc) {
    new IdleGc(gc, (e) =>
      logger.info(
        { heapBeforeMb: mb(e.heapBefore), heapAfterMb: mb(e.heapAfter), rssBeforeMb: mb(e.rssBefore), compacted: e.compacted, ms: Math.round(e.ms) },
        'idle: heap collected after a burst',
      ),
    ).start();
  }
  if (stopSignal !== null) shutDown(node, stopSignal);
}

const mb = (b: number) => Math.round(b / 1048576);
