package waitroom_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/waitroom/waitroom/waitroom"
)

// A key set signs with its first key and verifies with every key, so the
// origin and each gateway share one set and keys rotate without dropping the
// queue. A token is valid only for its own event.
func ExampleKeySet() {
	now := func() time.Time { return time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC) }
	keys, err := waitroom.NewKeySet(now, waitroom.Key{ID: "k1", Secret: []byte("0123456789abcdef0123456789abcdef")})
	if err != nil {
		panic(err)
	}

	issued, err := keys.Issue("visitor-7", 42, 12400, 30*time.Minute)
	if err != nil {
		panic(err)
	}

	t, err := keys.Verify(issued.Raw, 42)
	if err != nil {
		panic(err)
	}
	fmt.Println(t.Subject, t.Event, t.Position, t.ExpiresAt.Format(time.RFC3339))

	_, err = keys.Verify(issued.Raw, 43)
	fmt.Println(errors.Is(err, waitroom.ErrInvalidToken), errors.Is(err, waitroom.ErrWrongEvent))
	// Output:
	// visitor-7 42 12400 2026-05-01T10:30:00Z
	// true true
}

// A room is one event as a node sees it. On the memory store (one node, no
// dependencies) it hands out positions and admits those at or below the
// watermark; raising the watermark admits the next ones.
func ExampleRoom() {
	ctx := context.Background()
	room := waitroom.NewRoom(waitroom.NewMemoryStore(nil), 42, waitroom.RoomOptions{
		Defaults: waitroom.Defaults{Watermark: 2},
	})
	if _, err := room.Refresh(ctx); err != nil {
		panic(err)
	}

	for range 3 {
		pos, err := room.Join(ctx)
		if err != nil {
			panic(err)
		}
		fmt.Println("position", pos, "admitted:", room.State().Admits(pos))
	}

	s, err := room.Update(ctx, waitroom.Change{RaiseBy: 1})
	if err != nil {
		panic(err)
	}
	fmt.Println("watermark", s.Watermark, "position 3 admitted:", s.Admits(3))
	// Output:
	// position 1 admitted: true
	// position 2 admitted: true
	// position 3 admitted: false
	// watermark 3 position 3 admitted: true
}
