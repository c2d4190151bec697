/**
 * Which client connection a request came on. The HTTP front (front.ts) hands some
 * requests to node:http through a stand-in stream per connection; node:http then sees
 * that stream as the request's socket. The demand signal (bindings/demand.ts) tells
 * clients apart by connection, so both paths name the client's socket.
 *
 * Owns: the map from a stand-in stream to its socket. Must never: hold either alive
 * (a WeakMap).
 */

const socketOf = new WeakMap<object, object>();

/** `stream` stands in for `socket` (front.ts's relay). */
export function standsFor(stream: object, socket: object): void {
  socketOf.set(stream, socket);
}

/** The client connection of a request whose socket is `socket`: itself, or the socket a relay stands in for. */
export function clientConnection(socket: object): object {
  return socketOf.get(socket) ?? socket;
}
