// Package hashtag owns the Redis Cluster hash tag of an event, {evt:N}:
// every key of an event (its queue state in package waitroom, its
// inventory in package inventory, the origin's records of it) carries the
// tag, so they all live on one slot and one script may touch any of them.
// It imports nothing of the project, so every package may import it.
package hashtag

import "strconv"

// Event is the hash tag of event's keys.
func Event(event int64) string { return "{evt:" + strconv.FormatInt(event, 10) + "}" }
