package inventory

import (
	"encoding/json"
	"fmt"
	"slices"
)

// HoldScriptSource is the hold script's text, for a benchmark that runs it
// bare (redis-benchmark's EVALSHA) beside the origin that wraps it.
func HoldScriptSource() string { return holdSrc }

// HoldScriptArgs are the KEYS and ARGV of one hold call, in the order the
// script takes them: what Hold sends, for running it outside this package.
func HoldScriptArgs(req HoldRequest, reclaimLimit int) (keys []string, argv []any, err error) {
	var seats []string
	if len(req.Seats) > 0 {
		// Sorted, so every hold takes its seats in one order.
		seats = slices.Sorted(slices.Values(req.Seats))
	}
	rec, err := json.Marshal(Record{User: req.User, Quantity: req.Quantity, KeyDigest: req.KeyDigest, BodyDigest: req.BodyDigest, Seats: seats, Section: req.Section})
	if err != nil {
		return nil, nil, fmt.Errorf("encode record: %w", err)
	}
	keys = KeysFor(req.Event).all()
	argv = []any{req.User, req.HoldID, req.Quantity, ms(req.ExpiresAt), ms(req.Now), string(rec), reclaimLimit}
	if req.Claim != "" {
		keys = append(keys, req.Claim)
		argv = append(argv, req.ClaimValue, req.ClaimTTL.Milliseconds(), req.ClaimReplace)
	}
	if !req.Deadline.IsZero() {
		if req.Claim == "" {
			argv = append(argv, "", 0, "")
		}
		argv = append(argv, ms(req.Deadline))
	}
	return keys, argv, nil
}
