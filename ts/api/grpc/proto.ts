/**
 * The public API's contract: the reference's v1.18 `.proto` files, committed unchanged
 * in `proto/qdrant/` (see the NOTICE there), loaded once with @grpc/proto-loader.
 *
 * Loader options, fixed for every handler: snake_case field names (`keepCase`), 64-bit
 * integers as decimal strings, enums by name, unset fields absent (`defaults: false`),
 * and for each oneof a virtual field naming the member that is set.
 *
 * A request the decoder cannot read (malformed or truncated bytes, messages nested past
 * protobuf's limit of 100 levels) does not throw: each method's request deserializer
 * hands the wrapper (server.ts) an UndecodableRequest instead, which it answers
 * INVALID_ARGUMENT once the caller is known.
 *
 * Owns: finding and loading the files, the list of services, decoding requests. Must
 * never: serve.
 */

import * as fs from 'node:fs';
import * as path from 'node:path';

import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';

/** The loader options every handler's message shapes follow. */
export const LOADER_OPTIONS: protoLoader.Options = { keepCase: true, longs: String, enums: String, defaults: false, oneofs: true };

/** The services of the public API, by full name. */
export const SERVICE_NAMES = ['qdrant.Qdrant', 'qdrant.Collections', 'qdrant.Points', 'qdrant.Snapshots'] as const;
export type ServiceName = (typeof SERVICE_NAMES)[number];

/** The folder holding the public API's .proto files (`proto/qdrant`, above ts/ or dist/ts/). */
export function protoDir(): string {
  let dir = __dirname;
  for (;;) {
    const candidate = path.join(dir, 'proto', 'qdrant');
    if (fs.existsSync(path.join(candidate, 'qdrant.proto'))) return candidate;
    const parent = path.dirname(dir);
    if (parent === dir) throw new Error('proto/qdrant/qdrant.proto not found above ' + __dirname);
    dir = parent;
  }
}

/** What a method's handler gets in place of a request whose bytes could not be decoded. */
export class UndecodableRequest {
  constructor(
    /** The decoder's reason (`index out of range: 9 + 10 > 4`, `maximum nesting depth exceeded`). */
    readonly reason: string,
  ) {}
}

/** `deserialize`, answering an UndecodableRequest where it throws. */
function tolerant(deserialize: grpc.deserialize<unknown>): grpc.deserialize<unknown> {
  return (bytes: Buffer) => {
    try {
      return deserialize(bytes);
    } catch (err) {
      return new UndecodableRequest(err instanceof Error ? err.message : String(err));
    }
  };
}

let loaded: Record<ServiceName, grpc.ServiceDefinition> | null = null;

/** The service definitions of the contract (loaded on first use). */
export function serviceDefinitions(): Record<ServiceName, grpc.ServiceDefinition> {
  if (loaded !== null) return loaded;
  const dir = protoDir();
  const def = protoLoader.loadSync('qdrant.proto', { ...LOADER_OPTIONS, includeDirs: [dir] });
  const out = {} as Record<ServiceName, grpc.ServiceDefinition>;
  for (const name of SERVICE_NAMES) {
    const svc = def[name];
    // A message or enum type carries `format`; a service is a map of its methods.
    if (svc === undefined || 'format' in svc) throw new Error(`${name} is not a service of proto/qdrant`);
    const methods = Object.entries(svc as unknown as grpc.ServiceDefinition).map(([rpc, m]) => [rpc, { ...m, requestDeserialize: tolerant(m.requestDeserialize) }]);
    out[name] = Object.fromEntries(methods) as grpc.ServiceDefinition;
  }
  loaded = out;
  return out;
}
