package waitroom_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/testenv"
	"github.com/waitroom/waitroom/waitroom"
)

func TestJudgeAllHeldIsNotSoldOut(t *testing.T) {
	origin := waitroom.State{SoldOut: true, SoldOutBy: waitroom.ActorOrigin}
	operator := waitroom.State{SoldOut: true, SoldOutBy: "admin"}
	unknown := waitroom.State{SoldOut: true}
	held := waitroom.Inventory{Sellable: 10, Held: 3, Confirmed: 7, HoldTTLSeconds: 300}
	for _, tc := range []struct {
		name  string
		s     waitroom.State
		inv   waitroom.Inventory
		fresh bool
		want  waitroom.Availability
	}{
		{"open, seats left", waitroom.State{}, waitroom.Inventory{Sellable: 10, Remaining: 4, Held: 3}, true, waitroom.Availability{}},
		{"the origin's flag, seats held", origin, held, true,
			waitroom.Availability{AllHeld: true, MayReturn: 3, Within: 5 * time.Minute}},
		{"the origin's flag, nothing held", origin, waitroom.Inventory{Sellable: 10, Confirmed: 10}, true,
			waitroom.Availability{SoldOut: true}},
		{"the origin's flag, figures too old to tell", origin, held, false, waitroom.Availability{SoldOut: true}},
		{"the origin's flag ahead of its figures", origin, waitroom.Inventory{Sellable: 10, Remaining: 1, Confirmed: 9}, true,
			waitroom.Availability{AllHeld: true, MayReturn: 1, Within: waitroom.DefaultHoldWindow}},
		{"an operator's flag, seats held", operator, held, true,
			waitroom.Availability{SoldOut: true, AllHeld: true, MayReturn: 3, Within: 5 * time.Minute}},
		{"a flag of no known actor (restored), seats held", unknown, held, true,
			waitroom.Availability{SoldOut: true, AllHeld: true, MayReturn: 3, Within: 5 * time.Minute}},
		{"no flag yet, nothing left, seats held", waitroom.State{}, held, true,
			waitroom.Availability{AllHeld: true, MayReturn: 3, Within: 5 * time.Minute}},
		{"no flag, nothing left, nothing held", waitroom.State{}, waitroom.Inventory{Sellable: 10, Confirmed: 10}, true,
			waitroom.Availability{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, waitroom.Judge(tc.s, tc.inv, tc.fresh))
		})
	}
}

func TestStoreKeepsWhoSoldOut(t *testing.T) {
	stores(t, func(t *testing.T, s waitroom.Store) {
		ctx := context.Background()
		evt := testenv.EventID()
		_, err := s.Ensure(ctx, evt, waitroom.Defaults{})
		require.NoError(t, err)
		st, err := s.Update(ctx, evt, waitroom.Change{SoldOut: ptr(true), Actor: waitroom.ActorOrigin})
		require.NoError(t, err)
		assert.Equal(t, waitroom.ActorOrigin, st.SoldOutBy)
		st, err = s.State(ctx, evt)
		require.NoError(t, err)
		assert.Equal(t, waitroom.ActorOrigin, st.SoldOutBy)

		st, err = s.Update(ctx, evt, waitroom.Change{SoldOut: ptr(true), Actor: "admin"})
		require.NoError(t, err)
		assert.Equal(t, "admin", st.SoldOutBy, "an operator's flag over the origin's is the operator's")

		st, err = s.Update(ctx, evt, waitroom.Change{SoldOut: ptr(false), Actor: "admin"})
		require.NoError(t, err)
		assert.Empty(t, st.SoldOutBy)
		st, err = s.State(ctx, evt)
		require.NoError(t, err)
		assert.Equal(t, waitroom.State{Event: evt}, st)
	})
}

func TestRoomAvailabilityFollowsThePublishedFigures(t *testing.T) {
	now := time.Unix(1_900_000_000, 0)
	clock := func() time.Time { return now }
	r := waitroom.NewRoom(waitroom.NewMemoryStore(clock), testenv.EventID(), waitroom.RoomOptions{Now: clock})
	ctx := context.Background()
	_, err := r.Refresh(ctx)
	require.NoError(t, err)
	_, err = r.Update(ctx, waitroom.Change{SoldOut: ptr(true), Actor: waitroom.ActorOrigin})
	require.NoError(t, err)
	require.NoError(t, r.PublishInventory(ctx, waitroom.Inventory{Sellable: 5, Held: 2, Confirmed: 3}))
	assert.Equal(t, waitroom.Availability{AllHeld: true, MayReturn: 2, Within: waitroom.DefaultHoldWindow}, r.Availability())

	now = now.Add(waitroom.InventoryFresh + time.Second)
	assert.Equal(t, waitroom.Availability{SoldOut: true}, r.Availability(), "an origin gone silent says nothing of its holds")
}
