/**
 * The payload index requests of the reference's API in their JSON form: the body of
 * `PUT /collections/{name}/index` (gRPC `CreateFieldIndex` is translated to it first).
 *
 * Owns: checking the field name and the field schema before anything is proposed, with
 * the reference's errors. Must never: know a transport or touch a collection.
 */

import { FieldSchemaError, parseFieldSchema, type FieldSchema } from '../../shard/field-schema';
import { parseKey } from '../../shard/filter';
import { checkTextSupport } from '../../shard/text-index';
import { BadInputError, FormatError } from '../../common/errors';
import type { Obj } from './parse';

/** The body of a create-index request: the field's key path and its schema. */
export function createIndexBody(b: Obj): { field: string; schema: FieldSchema } {
  if (typeof b.field_name !== 'string') throw new FormatError('missing field `field_name`');
  const field = b.field_name;
  try {
    parseKey(field, 'field_name');
  } catch (err) {
    throw new FormatError(`field_name: ${(err as Error).message}`);
  }
  if (b.field_schema === undefined || b.field_schema === null) {
    throw new BadInputError("Can't auto-detect field type, please specify `field_schema` in the request");
  }
  try {
    const schema = parseFieldSchema(b.field_schema);
    checkTextSupport(schema);
    // on_disk: true (every type) keeps the index's values in files read on demand
    // (ts/shard/field-index.ts); `memory` other than "pinned" is refused.
    const memory = schema.params?.memory;
    if (memory === 'cold' || memory === 'cached') {
      throw new BadInputError(`field_schema.memory: "${memory}" is not supported: Quiver has no memory tiers for payload indexes (their values are in memory, or with on_disk: true in files read on demand); omit memory or set it to "pinned"`);
    }
    // Quiver builds no payload-aware HNSW links (hnsw_config.payload_m is refused too), so
    // only the "no links" setting describes what it does.
    if (schema.params?.enable_hnsw === true) {
      throw new BadInputError('field_schema.enable_hnsw: true is not supported: Quiver builds no payload-aware HNSW links for a field; omit enable_hnsw or set it to false');
    }
    return { field, schema };
  } catch (err) {
    if (err instanceof FieldSchemaError) throw new FormatError(`field_schema: ${err.message}`);
    throw err;
  }
}
