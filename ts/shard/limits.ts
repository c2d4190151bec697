/**
 * Bounds that request input is held to before it reaches the recursive validators or
 * the engine, shared by the REST layer (which refuses input past them) and the code
 * that must stay safe even when a caller forgot to check.
 *
 * Owns: the numbers. Must never: depend on anything (both the API and the shard layer
 * import it).
 */

/**
 * How deep arrays and objects may nest: the reference parses bodies with serde_json,
 * whose default recursion limit (128) refuses a 128th nested level and serves 127.
 * Request bodies are checked against it before they are parsed (ts/api/rest/body.ts);
 * the filter and payload validators refuse deeper input on their own as well, so no
 * input can run them out of stack.
 */
export const MAX_NESTING_DEPTH = 127;

/**
 * The largest count the engine takes (`k`, `ef`, full-scan thresholds are 32-bit in
 * quiver-core). Request fields that become such a count (`limit`, `offset`,
 * `params.hnsw_ef`, and `params.quantization.oversampling`, a multiplier of `k`) are
 * refused above it; no index can hold more points than this, so nothing that could be
 * answered is refused.
 */
export const MAX_ENGINE_COUNT = 0xffff_ffff;
