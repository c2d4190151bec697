/**
 * Collections and aliases in the JSON form of the reference's API: the alias actions of
 * `POST /collections/aliases` parsed, and CollectionInfo (`GET /collections/{name}`) as
 * the REST answer has it. The gRPC API translates its messages to and from these.
 *
 * Owns: that parsing and that answer's shape. Must never: know a transport or change
 * anything.
 */

import type { Collection } from '../../collection/collection';
import { FormatError } from '../../common/errors';
import type { AliasAction } from '../../storage/toc';
import { isObj, type Obj } from './parse';

/** CollectionInfo of `c`, as `GET /collections/{name}` answers it. */
export function collectionInfo(c: Collection): Record<string, unknown> {
  const cfg = c.config;
  return {
    status: c.status(),
    optimizer_status: 'ok',
    indexed_vectors_count: c.indexedVectorsCount(),
    points_count: c.pointsCount(),
    segments_count: c.segmentsCount(),
    config: {
      params: cfg.params,
      hnsw_config: cfg.hnsw_config,
      optimizer_config: cfg.optimizer_config,
      wal_config: cfg.wal_config,
      quantization_config: cfg.quantization_config,
      // As the reference: only when the collection has a strict mode configuration.
      ...(cfg.strict_mode_config === undefined ? {} : { strict_mode_config: cfg.strict_mode_config }),
      // As the reference: only when the collection has metadata.
      ...(cfg.metadata === undefined ? {} : { metadata: cfg.metadata }),
    },
    payload_schema: c.payloadSchemaInfo(),
  };
}

/** The `actions` of a ChangeAliasesOperation body. */
export function parseAliasActions(b: Obj): AliasAction[] {
  if (!Array.isArray(b.actions)) throw new FormatError('missing field `actions`');
  return b.actions.map((a: unknown, i: number): AliasAction => {
    const where = `actions[${i}]`;
    if (!isObj(a) || Object.keys(a).length !== 1) throw new FormatError(`${where}: expected one of \`create_alias\`, \`delete_alias\`, \`rename_alias\``);
    const str = (o: unknown, k: string): string => {
      if (!isObj(o) || typeof o[k] !== 'string') throw new FormatError(`${where}: missing field \`${k}\``);
      return o[k] as string;
    };
    if ('create_alias' in a) return { create_alias: { collection_name: str(a.create_alias, 'collection_name'), alias_name: str(a.create_alias, 'alias_name') } };
    if ('delete_alias' in a) return { delete_alias: { alias_name: str(a.delete_alias, 'alias_name') } };
    if ('rename_alias' in a) {
      return { rename_alias: { old_alias_name: str(a.rename_alias, 'old_alias_name'), new_alias_name: str(a.rename_alias, 'new_alias_name') } };
    }
    throw new FormatError(`${where}: unknown variant \`${Object.keys(a)[0]}\`, expected one of \`create_alias\`, \`delete_alias\`, \`rename_alias\``);
  });
}
