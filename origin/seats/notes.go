package seats

import (
	"context"
	"sync"

	"github.com/waitroom/waitroom/waitroom"
)

// holderNotes sends the notes of an event's new holds to the gateways'
// store (waitroom.Room.NoteHolders), one call at a time: the holds made
// while a call is in flight gather, and the next call takes them all. A
// crowd of holds costs the store one call per batch instead of one per
// hold, and a hold made alone costs what it did.
type holderNotes struct {
	send func(context.Context, []waitroom.Holder) error

	mu        sync.Mutex
	sending   bool
	gathering *noteBatch
}

// noteBatch is the notes that gathered while a call was in flight.
type noteBatch struct {
	holders []waitroom.Holder
	done    chan struct{}
	err     error
}

// note sends h, alone when no call is in flight, else in the next call
// with the others that gathered meanwhile, and returns its call's error
// (or ctx's: the note is sent all the same).
func (n *holderNotes) note(ctx context.Context, h waitroom.Holder) error {
	n.mu.Lock()
	if n.sending {
		b := n.gathering
		if b == nil {
			b = &noteBatch{done: make(chan struct{})}
			n.gathering = b
		}
		b.holders = append(b.holders, h)
		n.mu.Unlock()
		select {
		case <-b.done:
			return b.err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	n.sending = true
	n.mu.Unlock()
	err := n.send(ctx, []waitroom.Holder{h})
	if b := n.next(); b != nil {
		// Sent apart from this hold's request, which is answered now.
		go n.drain(b)
	}
	return err
}

// next takes the batch gathered, or, when none has, ends the sending.
func (n *holderNotes) next() *noteBatch {
	n.mu.Lock()
	defer n.mu.Unlock()
	b := n.gathering
	n.gathering = nil
	if b == nil {
		n.sending = false
	}
	return b
}

// drain sends b, then each batch that gathered while it was in flight,
// each bounded as a hold's own note is.
func (n *holderNotes) drain(b *noteBatch) {
	for ; b != nil; b = n.next() {
		ctx, cancel := context.WithTimeout(context.Background(), admissionExtendTimeout)
		b.err = n.send(ctx, b.holders)
		cancel()
		close(b.done)
	}
}
