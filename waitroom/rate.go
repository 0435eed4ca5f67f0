package waitroom

import (
	"sync"
	"time"
)

// rateWindow is how far back the watermark's advance is measured: long enough
// to smooth out manual raises, short enough to follow a change of pace.
const rateWindow = 10 * time.Minute

type sample struct {
	at        time.Time
	watermark int64
}

// rateMeter measures how fast the watermark advances.
type rateMeter struct {
	mu      sync.Mutex
	now     func() time.Time
	samples []sample
}

func newRateMeter(now func() time.Time) *rateMeter { return &rateMeter{now: now} }

func (m *rateMeter) observe(watermark int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	if n := len(m.samples); n > 0 && m.samples[n-1].watermark == watermark {
		return
	}
	if n := len(m.samples); n > 0 && watermark < m.samples[n-1].watermark {
		// Lowered by hand: the old pace no longer says anything.
		m.samples = m.samples[:0]
	}
	m.samples = append(m.samples, sample{at: now, watermark: watermark})
	m.trim(now)
}

// trim drops samples older than the window, except the newest: it is the
// baseline the next raise is measured from.
func (m *rateMeter) trim(now time.Time) {
	cut := 0
	for cut < len(m.samples)-1 && now.Sub(m.samples[cut].at) > rateWindow {
		cut++
	}
	if cut > 0 {
		m.samples = append(m.samples[:0], m.samples[cut:]...)
	}
}

// perSecond is positions admitted per second over the window, measured up to
// now so that a stalled watermark slows the estimate down; 0 when unknown.
func (m *rateMeter) perSecond() float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	m.trim(now)
	if len(m.samples) < 2 {
		return 0
	}
	first, last := m.samples[0], m.samples[len(m.samples)-1]
	elapsed := now.Sub(first.at).Seconds()
	if elapsed < 1 || last.watermark <= first.watermark {
		return 0
	}
	return float64(last.watermark-first.watermark) / elapsed
}
