/** Route patterns of the reference's OpenAPI spec that the contract tests call. */

export const ALIASES = '/collections/aliases';
export const COLLECTION = '/collections/{collection_name}';
export const COLLECTION_ALIASES = '/collections/{collection_name}/aliases';
export const EXISTS = '/collections/{collection_name}/exists';
export const INDEX = '/collections/{collection_name}/index';
export const INDEX_FIELD = '/collections/{collection_name}/index/{field_name}';
export const POINTS = '/collections/{collection_name}/points';
export const BATCH = '/collections/{collection_name}/points/batch';
export const COUNT = '/collections/{collection_name}/points/count';
export const DELETE = '/collections/{collection_name}/points/delete';
export const PAYLOAD = '/collections/{collection_name}/points/payload';
export const PAYLOAD_CLEAR = '/collections/{collection_name}/points/payload/clear';
export const PAYLOAD_DELETE = '/collections/{collection_name}/points/payload/delete';
export const QUERY = '/collections/{collection_name}/points/query';
export const QUERY_BATCH = '/collections/{collection_name}/points/query/batch';
export const RECOMMEND = '/collections/{collection_name}/points/recommend';
export const RECOMMEND_BATCH = '/collections/{collection_name}/points/recommend/batch';
export const SCROLL = '/collections/{collection_name}/points/scroll';
export const SEARCH = '/collections/{collection_name}/points/search';
export const SEARCH_BATCH = '/collections/{collection_name}/points/search/batch';
export const VECTORS = '/collections/{collection_name}/points/vectors';
export const VECTORS_DELETE = '/collections/{collection_name}/points/vectors/delete';
export const POINT = '/collections/{collection_name}/points/{id}';
