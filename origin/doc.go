// Package origin is the bundled origin service: the part of a ticket sale
// that must never be wrong. This package is its wiring (New, Start, Run),
// its configuration, its HTTP API (the http_*.go handlers, docs/api.md
// §5–§13, docs/openapi.yaml), who may call it (auth.go), and the one
// mapping from the outcomes of the packages below to answers (answers.go).
// The work is theirs:
//
//   - ledger: PostgreSQL, the truth. Migrations, every statement, the
//     group-commit writer of new holds, named operations alone or in one
//     transaction. Nothing else of the origin speaks to PostgreSQL.
//   - seats: the seat protocol between Redis (package inventory, one Lua
//     script per change) and the ledger. A hold is taken in Redis and
//     written at once as a pending row; if the row cannot be written the
//     seats go back at once, and a write whose outcome is unknown keeps
//     them until it is final. It keeps the invariant below, correcting
//     drift while the sale goes on (the ledger wins), with a rebuild for
//     drift that lasts or keys that are missing.
//   - booking: a booking turns a hold into a sale. The booking row and the
//     hold's extension in one transaction, the provider's charge outside
//     any transaction under a key derived from the booking, the outcome
//     from at-least-once webhooks or from the payment reconciliation
//     asking the provider; late payments confirmed from the overflow
//     reserve or refunded; refunds followed to the provider's word; a
//     ticket per seat, signed with the ticket key, that verifies offline.
//   - maintenance: the reaper, the drift corrector, the resolver of
//     uncertain writes and the payment reconciler, each a service with its
//     own Config, Start, Stop and RunOnce.
//   - payment: the providers (fakepay, Stripe).
//
// The invariant, for every event:
//
//	remaining (Redis) == sellable − seats of (confirmed + unexpired pending holds)
//
// A hold request goes: the handler (http_holds.go) checks the token and
// the admission, seats.Protocol.Place runs the hold script and writes the
// row, and answers.go turns the outcome into the response.
//
// Buyers are identified by their queue token (package waitroom), verified
// with the same key set the gateway signs with, and admitted by the event's
// admission state that the gateways share through Redis.
package origin
