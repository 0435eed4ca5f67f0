// Package sim is a seeded, replayable simulation of whole sales against the
// real origin code, on a real Redis and PostgreSQL, under faults.
//
// # A run
//
// A run is a seed and a list of steps. The seed draws the sale (SetupOf: 2
// or 3 origin nodes sharing one Redis and one database, the number of
// buyers, seats, overflow reserve, per-user limit and hold lifetime) and
// the steps (Generate), from math/rand/v2 PCG streams: every decision is in
// the step list, none is made while it runs. The sale is of one of four
// kinds, the seed modulo 4:
//
//   - 0, general admission: one event sold by quantity, with an overflow
//     reserve;
//   - 1, reserved seats: a seat map of two sections of rows, held by
//     seat_ids, best_available or quantity;
//   - 2, general-admission sections: a map of one reserved section and two
//     general-admission sections (places sold by quantity from buckets);
//   - 3, two events on the same servers, general admission, each with its
//     own buyers and gate devices.
//
// Every event gets two gate devices, registered for it as API.md §12 says
// ({"gate","event"}); shared-token scans name their event.
//
// Each step is one of
//
//   - admit: the watermark raised in the shared admission store (buyers
//     carry queue tokens signed with the origin's key set, their positions
//     in order of first arrival);
//   - hold: 1 to max_per_user seats (now and then one more), with a new
//     Idempotency-Key, the user's last key and body again, or the last key
//     with another body; sometimes the same request twice at once on two
//     nodes;
//   - release, cancel: of one of the user's holds or bookings;
//   - book: with pm_card_visa, pm_card_chargeDeclined, pm_fakepay_silent,
//     pm_fakepay_refund_fails, pm_fakepay_fail_then_succeed (declined, then
//     succeeded a second later by the provider's clock, both webhooks; often with
//     the create's answer lost, so the booking waits for both) or
//     pm_fakepay_refund_refused, keys chosen as for holds, sometimes raced;
//   - persist: a buyer whose card is declined books the same hold again and
//     again, the clock moving on between attempts;
//   - webhook: fakepay's webhooks are caught, not delivered; this step
//     delivers a queued one (any of them: out of order), twice at once to
//     two nodes, delivers it and keeps it for later (a duplicate), drops it
//     (lost; but an event the origin has no other way to learn, such as a
//     dashboard refund's charge.refunded, is never lost for good, unless
//     the origin marked the sale as one with a refund pending at the
//     provider, which its payment reconciliation asks about), has the
//     provider send a payment's outcome again (also a silent payment's),
//     or delivers every queued event of one booking at once to different
//     nodes (a burst: a failure and a success racing),
//     or delivers the newest queued event of the buyer's own bookings (own:
//     only in the pairing below);
//   - reap, reconcile, resolve, payrecon: one pass of the reaper, the
//     reconciler, the uncertain-write check or the payment reconciliation
//     on one node;
//   - clock: the injected clock moves on, by seconds, tens of seconds, or
//     past a hold's whole lifetime;
//   - redis-restart (empty), redis-flush (FLUSHALL), redis-down (until
//     healed), pg-down (one node's PostgreSQL connections cut until
//     healed), heal;
//   - refund: the provider's refunds of a payment stay pending from now
//     on, or a pending one ends late, succeeded or failed, with its
//     webhooks (queued like the others);
//   - provider-refund: the provider refunds a third or all of a payment
//     from its dashboard (charge.refunded; pending: of a payment whose
//     refunds stay pending), refuses its refunds from now on as invalid
//     requests, or has a payment whose booking is not confirmed changed to
//     half its amount (no booking may be confirmed on it);
//   - foreign: the provider announces a payment the origin never made, for
//     a booking nobody knows or one of the run's (left out of the money
//     check: the origin owes nothing for it);
//   - rebuild: one node rebuilds an event's inventory from the ledger;
//   - scan: a ticket (valid or void) shown at a device of its event or of
//     the other event, online, by the shared token, uploaded from offline,
//     or uploaded backdated before the ticket was issued;
//   - revoke: a gate device revoked; void-read: a device reads its event's
//     void feed from its cursor;
//   - settle: see below.
//
// and a hold, release, booking, cancellation, webhook or pass may run
// under a fault of its own: redis-reply-lost (the node's Redis replies held
// while it runs: the commands ran, the answers are lost), pg-cut-mid-tx
// (the node's PostgreSQL traffic held, then the connections cut: nothing
// sent ran), pg-cut-reply-lost (PostgreSQL runs what is sent, the replies
// are held, then the connections are cut: a commit the node never heard
// of), pg-cut-after-redis (a settlement's PostgreSQL traffic held from the
// node's first Redis script call on, then cut: a hold confirmed in Redis
// whose ledger step failed), pg-stall-after-redis (a hold's PostgreSQL
// traffic held a while from its first Redis script call on, then let go:
// its row reaches the ledger late, after its seats were taken in Redis;
// two times in three the hold is a returning buyer's whose earlier hold
// lapsed while paying, and that payment's event lands beside it; in a sale
// of general-admission sections, one hold of a section in four is followed
// by other buyers' holds of the rest of the section, its booking with a
// card whose success the provider sends, that event delivered (own) under
// pg-cut-after-redis, the clock past the holds' lifetime, one more buyer's
// hold of the section for all a buyer may take (the ledger's buckets
// short: it expires the lapsed holds itself, the one confirmed in Redis
// among them) and a settle point),
// pay-failure and pay-timeout (every provider call fails before the
// provider, or does its work and loses its answer). The faults go through
// one internal/faultproxy per node in front of Redis and of PostgreSQL;
// the Redis is the run's own (never a shared one) and the database too.
//
// # Concurrency
//
// About a third of the steps run beside the step before them (par=true in
// the list, at most 4 to a group, often for the same buyer): the steps of a
// group start together, each at its own seeded offset (at=…ms), as
// goroutines; a buyer's hold, booking, release and payments then race each
// other and the passes (reaper, drift corrector, reconciliations,
// rebuilds) on 2–3 nodes. The model's state has one lock, which a step
// lets go of while its requests are under way. The groups are the
// interleaving points recorded in the list: a printed list replays the same
// groups, and a shrunk list keeps them (a step whose group lost its first
// step joins the group before). Within a group the order of requests is
// the scheduler's, and the origin's own timing (goroutines, timeouts)
// differs between runs too, which is why a failure is shrunk and replayed
// rather than trusted to repeat byte for byte. The checks run after each
// group; a settle point runs alone. SIM_SERIAL=1 draws no groups.
//
// # What is checked
//
// After every group, for every event, from the ledger's tables and Redis,
// read without going through the code under test (queries.go): never more
// seats confirmed than the capacity, overflow within its reserve, no seat
// number with two valid tickets, one valid ticket per confirmed seat, no
// more seats held and sold from the pool than it has, Redis's remaining
// never below 0, no user with more than max_per_user seats held or bought,
// no pending hold living past its whole-life cap (Config.HoldMaxLife, 2 ×
// the hold TTL); for each general-admission section, its buckets'
// remaining plus the places of its pending and confirmed holds is its
// capacity in the ledger, and its places left plus its hold records' places
// is its capacity in Redis (section-count); every valid ticket's seat or
// place is its own hold's in the map (seat-owner), no place is numbered for
// a hold that ended (place-numbers), no booking pays or is paid on a hold
// its buyer released (release-race), no ticket voided after a gate let its
// holder in (let-in-voided); no ticket admitted at another event's
// gate (gate-event), by two online scans or by a scan dated before its
// issue (admitted-once); a revoked device's scans and void-feed reads are
// refused (gate-revoked, by their answers); a void feed never gives a valid
// ticket, nor one twice. Every answer: never a 500, never an answer after 20 s; a
// hold never goes to a position the watermark never reached; an
// Idempotency-Key that made a hold or booking, replayed, never makes a
// second, reused with another body never a new one (a key whose answers
// only named one made with another key lives in Redis and may be forgotten
// with it).
//
// At each settle step (and at the end, after moving the clock past every
// deadline): the faults are healed, the writes given up on are left to
// become final (a write timeout of wall time), and the passes but the drift
// corrector run on every node until nothing moves; unless Redis lost its
// state since the last settle point, drift must then be 0 already
// (drift-lost: a count the protocol lost, such as a place that vanished,
// which the corrector would only paper over). Then every pass runs on
// every node until nothing moves (at most 6 rounds, 10 at the end), and
// drift must be 0 (CheckInvariant) and the money must be accounted for: every
// payment the provider captured ends as a confirmed booking with its
// tickets, a refund the provider made, or a refund visibly pending or
// failed on the booking, never kept silently; at the end, a sale that
// stands records at least what the provider returned of its payment, once
// nothing of it is pending there; a booking is "refunded" only
// if the provider refunded it; the ledger's MoneyReport adds up and keeps
// nothing. Short of the end, a booking waiting for its payment within the
// payment reconciliation's interval is in flight, for both checks: a
// reserved seat its hold has sold in Redis and held in the ledger (a
// confirmation whose ledger step failed, its success event to be delivered
// again) is not drift there, since no clock moves at a settle point and
// the redelivery or the reconciliation completes it; at the end it is.
//
// # Running and replaying
//
//	make sim                          # CI's seeds (24 of each kind × 80 steps)
//	make sim-long                     # 200 more seeds of each kind × 300 steps
//	make sim SEED=8 STEPS=300         # one seed
//	make sim SEED=8 STEPS=300:66,69,71,75,78   # a shrunk run: those steps of the 300
//	make sim SEED=8 SIMSTEPS=/tmp/waitroom-sim-8.steps   # a step file
//
// go test ./sim/... runs CI's seeds too. A failure prints the seed, the
// step and what broke, then shrinks the list (delta debugging: chunks of
// steps removed while the same check still fails, for SIM_SHRINK, default
// 90 s), prints the shortest list found with the make command that
// replays it, and writes it as a step file (one step per line, the form
// printed; # starts a comment) that can be edited and replayed. Other
// knobs: SEEDS and SEED_BASE (which seeds), SIM_SKIP (step kinds or faults
// left out of the generation; a replay needs the same), SIM_SERIAL (no
// concurrent groups; a replay needs the same), SIM_SKIP_CHECKS
// (checks not enforced, while a finding is open), SIM_FAULTS=off (the sale
// without faults), SIM_TRACE=1 (every step and answer in the test log).
// The step files in testdata/ are short runs of the simulation's own steps
// that once reproduced a defect; TestSimRegressions replays each for its
// seed. The run ends with a summary: runs, steps, settle points, faults
// injected by kind, answers, payments as they ended, and the time taken.
package sim
