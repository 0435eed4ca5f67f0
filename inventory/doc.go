// Package inventory keeps an event's sellable seats in Redis: one atomic Lua
// script per operation (hold, release, confirm, extend, rebuild), every key
// of an event under the event's hash tag so the scripts run on Redis Cluster.
// A reserved-seating event keeps, besides the count, which hold has each
// seat: a hold takes the seats it names all together or none of them.
//
// Redis is a fast projection of the ledger, not the truth: the ledger (the
// origin's Postgres) wins when the two disagree, and Rebuild reloads Redis
// from it. Time is always the caller's (passed in ARGV, never Redis TIME), so
// the expiry of a hold follows the same clock as the ledger and tests run
// with a fake one.
package inventory
