// Package waitroom is the admission core shared by the Caddy module and the
// origin: signed queue tokens, queue positions, and each event's admission
// state (watermark, hard cap, sold out, paused) kept in a Store that one node
// (MemoryStore) or a fleet of nodes (RedisStore) can share.
//
// Nothing here touches a database on the request path: a Room keeps the
// event's state in memory and refreshes it in the background, so admitting a
// visitor is an HMAC check and a comparison.
package waitroom
