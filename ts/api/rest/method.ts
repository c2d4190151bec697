/** The HTTP methods the REST API routes (shared by the route table and the direct lane, which the table feeds). */
export type HttpMethod = 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';
