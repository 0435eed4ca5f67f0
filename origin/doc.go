// Package origin is the bundled origin service: the part of a ticket sale
// that must never be wrong.
//
// A hold is taken in Redis by one Lua script (package inventory) and written
// at once as a pending row of the Postgres ledger; if the row cannot be
// written the seats go back at once. The ledger is the truth: the reaper
// expires lapsed holds there first and then returns their seats, and the
// reconciler checks, for every event,
//
//	remaining (Redis) == sellable − seats of (confirmed + unexpired pending holds)
//
// exporting the difference as the drift gauge and rebuilding Redis from the
// ledger when asked (or when it finds the keys missing).
//
// A booking turns a hold into a sale: the booking row and the hold's
// extension in one transaction, the provider's charge outside any
// transaction under a key derived from the booking, and the outcome from
// at-least-once webhooks (deduplicated on the provider's event id) or from
// the payment reconciliation asking the provider. A payment that lands
// after its hold expired is confirmed from the overflow reserve, which the
// ledger counts with a conditional update, or refunded. Each confirmed seat
// gets a ticket whose code is signed with the ticket key and verifies
// offline (VerifyTicket).
//
// Buyers are identified by their queue token (package waitroom), verified
// with the same key set the gateway signs with, and admitted by the event's
// admission state that the gateways share through Redis.
package origin
