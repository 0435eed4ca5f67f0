package waitroom

import (
	"sync"
	"time"
)

// MaxAppliedWatermarks bounds the watermarks a room remembers applying:
// the newest are kept.
const MaxAppliedWatermarks = 4096

// AppliedWatermark is a watermark a node took into memory, and when by
// its own clock: from then on it admitted by it.
type AppliedWatermark struct {
	Watermark int64     `json:"watermark"`
	At        time.Time `json:"at"`
}

// appliedMarks is a room's record of the watermarks it applied, to tell
// how long a fleet took to agree on a change from the nodes' own view
// rather than from whoever asks them (docs/api.md §4).
type appliedMarks struct {
	mu      sync.Mutex
	marks   []AppliedWatermark
	dropped int64
}

func (a *appliedMarks) add(watermark int64, at time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.marks) == MaxAppliedWatermarks {
		// Drop the older half at once rather than shift on every change.
		half := MaxAppliedWatermarks / 2
		a.dropped += int64(half)
		a.marks = append(a.marks[:0], a.marks[half:]...)
	}
	a.marks = append(a.marks, AppliedWatermark{Watermark: watermark, At: at})
}

// AppliedWatermarks are the watermarks the room applied since it started,
// oldest first, each when it did; dropped is how many older ones it no
// longer remembers (MaxAppliedWatermarks).
func (r *Room) AppliedWatermarks() (marks []AppliedWatermark, dropped int64) {
	r.applied.mu.Lock()
	defer r.applied.mu.Unlock()
	return append([]AppliedWatermark(nil), r.applied.marks...), r.applied.dropped
}
