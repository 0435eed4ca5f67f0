package origin

import "sync"

// HoldRowPause holds back the next batch of hold rows s writes, before it
// is written, until Resume.
type HoldRowPause struct {
	// Held is closed once a batch is held back.
	Held chan struct{}
	open chan struct{}
	once sync.Once
}

// PauseHoldRows holds back the next batch of hold rows of s. Call it while
// no hold row is being written.
func PauseHoldRows(s *Server) *HoldRowPause {
	p := &HoldRowPause{Held: make(chan struct{}), open: make(chan struct{})}
	s.seats.HoldWriter().OnBatch(func(int) {
		p.once.Do(func() {
			close(p.Held)
			<-p.open
		})
	})
	return p
}

// Resume lets the batch held back go.
func (p *HoldRowPause) Resume() { close(p.open) }
