// Package sim is a seeded, replayable simulation of whole sales against the
// real origin code, on a real Redis and PostgreSQL, under faults.
//
// # A run
//
// A run is a seed and a list of steps. The seed draws the sale (SetupOf: 2
// or 3 origin nodes sharing one Redis and one database, the number of
// buyers, seats, overflow reserve, per-user limit and hold lifetime) and
// the steps (Generate), from math/rand/v2 PCG streams: every decision is in
// the step list, none is made while it runs. Each step is one of
//
//   - admit: the watermark raised in the shared admission store (buyers
//     carry queue tokens signed with the origin's key set, their positions
//     in order of first arrival);
//   - hold: 1 to max_per_user seats (now and then one more), with a new
//     Idempotency-Key, the user's last key and body again, or the last key
//     with another body; sometimes the same request twice at once on two
//     nodes;
//   - release, cancel: of one of the user's holds or bookings;
//   - book: with pm_card_visa, pm_card_chargeDeclined, pm_fakepay_silent or
//     pm_fakepay_refund_fails, keys chosen as for holds, sometimes raced;
//   - persist: a buyer whose card is declined books the same hold again and
//     again, the clock moving on between attempts;
//   - webhook: fakepay's webhooks are caught, not delivered; this step
//     delivers a queued one (any of them: out of order), twice at once to
//     two nodes, delivers it and keeps it for later (a duplicate), drops it
//     (lost), or has the provider send a payment's outcome again (also a
//     silent payment's);
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
//   - settle: see below.
//
// and a hold, release, booking, cancellation, webhook or pass may run
// under a fault of its own: redis-reply-lost (the node's Redis replies held
// while it runs: the commands ran, the answers are lost), pg-cut-mid-tx
// (the node's PostgreSQL traffic held, then the connections cut: nothing
// sent ran), pg-cut-reply-lost (PostgreSQL runs what is sent, the replies
// are held, then the connections are cut: a commit the node never heard
// of), pay-failure and pay-timeout (every provider call fails before the
// provider, or does its work and loses its answer). The faults go through
// one internal/faultproxy per node in front of Redis and of PostgreSQL;
// the Redis is the run's own (never a shared one) and the database too.
//
// Steps run one after the other; only a raced step sends two requests at
// once. The origin's own timing (goroutines, timeouts) may still differ
// between two runs of a list, which is why a failure is shrunk and
// replayed rather than trusted to repeat byte for byte.
//
// # What is checked
//
// After every step, from the ledger's tables and Redis's count, read
// without going through the code under test (queries.go): never more
// seats confirmed than the capacity, overflow within its reserve, no seat
// number with two valid tickets, one valid ticket per confirmed seat, no
// more seats held and sold from the pool than it has, Redis's remaining
// never below 0, no user with more than max_per_user seats held or bought,
// no pending hold living past its whole-life cap (Config.HoldMaxLife, 2 ×
// the hold TTL). Every answer: never a 500, never an answer after 20 s; a
// hold never goes to a position the watermark never reached; an
// Idempotency-Key replayed never makes a second hold or booking, reused
// with another body never a new one.
//
// At each settle step (and at the end, after moving the clock past every
// deadline): the faults are healed, the writes given up on are left to
// become final (a write timeout of wall time), and the passes run on every
// node until nothing moves (at most 6 rounds, 10 at the end). Then drift
// must be 0 (CheckInvariant) and the money must be accounted for: every
// payment the provider captured ends as a confirmed booking with its
// tickets, a refund the provider made, or a refund visibly pending or
// failed on the booking, never kept silently; a booking is "refunded" only
// if the provider refunded it; the ledger's MoneyReport adds up and keeps
// nothing.
//
// # Running and replaying
//
//	make sim                          # CI's seeds (24 × 300 steps)
//	make sim-long                     # 200 more seeds
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
// left out of the generation; a replay needs the same), SIM_SKIP_CHECKS
// (checks not enforced, while a finding is open), SIM_FAULTS=off (the sale
// without faults), SIM_TRACE=1 (every step and answer in the test log).
// The run ends with a summary: runs, steps, settle points, faults injected
// by kind, answers, payments as they ended, and the time taken.
package sim
