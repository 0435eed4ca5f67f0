package inventory

import "github.com/waitroom/waitroom/hashtag"

// Keys are the Redis keys of one event's inventory.
type Keys struct {
	// Remaining is the count of seats left to sell; missing means the event
	// is not loaded (never sold out: the two must not be confused).
	Remaining string
	// Users maps a user id to the id of the user's live hold.
	Users string
	// Holds maps a hold id to its Record (JSON).
	Holds string
	// Expiry is the sorted set of pending holds by expires_at (unix ms): the
	// index the reaper and the expired-hold reclaim read. No keyspace
	// notifications: they are dropped under load.
	Expiry string
	// Frozen is set while a rebuild loads the keys.
	Frozen string
	// Seats maps a reserved seat's id to the id of the hold that has it
	// (its record lists the seat); a seat not in it is free. Empty for a
	// general-admission event.
	Seats string
	// Sections maps a general-admission section of a seat map to its
	// places left to sell (a hold's record names its section); empty when
	// the map has none, and for a general-admission event.
	Sections string
}

// KeysFor returns event's keys.
func KeysFor(event int64) Keys {
	p := "inv:" + hashtag.Event(event) + ":"
	return Keys{
		Remaining: p + "remaining",
		Users:     p + "users",
		Holds:     p + "holds",
		Expiry:    p + "expiry",
		Frozen:    p + "frozen",
		Seats:     p + "seats",
		Sections:  p + "sections",
	}
}

// all is the KEYS list every script but rebuild_finish takes.
func (k Keys) all() []string {
	return []string{k.Remaining, k.Users, k.Holds, k.Expiry, k.Frozen, k.Seats, k.Sections}
}
