package waitroom

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/waitroom/waitroom/hashtag"
)

// Inventory is what the origin knows of an event's seats and of itself,
// published in the shared store for the gateways: the closed-loop
// autopilot steers by it, the staff console shows it. Seats are counted in
// seats, not holds.
type Inventory struct {
	// Sellable is the seats on sale (capacity less the overflow reserve).
	Sellable int64 `json:"sellable"`
	// Held is the seats in pending holds that have not expired.
	Held int64 `json:"held"`
	// Confirmed is the seats sold.
	Confirmed int64 `json:"confirmed"`
	// Remaining is the seats nobody holds: what a new buyer can still get.
	Remaining int64 `json:"remaining"`
	// ExpiringSoon is the seats of pending holds expiring within
	// InventorySoon: likely to come back unless their buyers pay.
	ExpiringSoon int64 `json:"expiring_soon"`
	// HoldTTLSeconds is how long a hold lasts unpaid: within it, the seats
	// held are bought or come back (Availability.Within). 0: not said.
	HoldTTLSeconds int64 `json:"hold_ttl_seconds,omitempty"`
	// Healthy is the origin's readiness (its Redis and PostgreSQL answer).
	Healthy bool `json:"healthy"`
	// ErrorRate is the share of the origin's recent answers that were
	// server errors (5xx), 0 to 1.
	ErrorRate float64 `json:"error_rate"`
	// At is when the figures were read.
	At time.Time `json:"at"`
}

// InventorySoon is how far ahead a hold's expiry counts it as expiring
// soon (Inventory.ExpiringSoon).
const InventorySoon = 10 * time.Second

// InventoryFresh is how old published figures may be and still be
// steered by: the origin publishes at least every second, so older ones
// mean it stopped (or cannot reach the store).
const InventoryFresh = 3 * time.Second

// inventoryKeep is how long the store keeps figures nobody refreshed.
const inventoryKeep = time.Minute

// ErrNoInventory is returned by InventoryStore.Inventory when nothing was
// published for the event (or it is older than the store keeps it).
var ErrNoInventory = errors.New("no inventory published for event")

// InventoryStore keeps the figures the origin publishes, one record per
// event, the newest.
type InventoryStore interface {
	PublishInventory(ctx context.Context, event int64, inv Inventory) error
	// Inventory reads the last figures published; ErrNoInventory when none.
	Inventory(ctx context.Context, event int64) (Inventory, error)
}

// PublishInventory writes the origin's figures for the room's event to the
// store, for every gateway sharing it.
func (r *Room) PublishInventory(ctx context.Context, inv Inventory) error {
	is, ok := r.store.(InventoryStore)
	if !ok {
		return fmt.Errorf("publish inventory: %w", errNoInventoryStore)
	}
	if inv.At.IsZero() {
		inv.At = r.opts.Now()
	}
	if err := is.PublishInventory(ctx, r.event, inv); err != nil {
		return err
	}
	r.inventory.Store(&inv)
	return nil
}

var errNoInventoryStore = errors.New("the store keeps no inventory")

// Inventory is the origin's last figures the room read (Run reads them at
// every poll), and whether they are known and fresh: published at most
// InventoryFresh ago, and dated at most InventoryFresh ahead of the room's
// clock (an origin's clock may be a little ahead; figures from far ahead
// would stay fresh until that time).
func (r *Room) Inventory() (Inventory, bool) {
	p := r.inventory.Load()
	if p == nil {
		return Inventory{}, false
	}
	age := r.opts.Now().Sub(p.At)
	return *p, age <= InventoryFresh && age >= -InventoryFresh
}

// syncInventory reads the published figures into memory.
func (r *Room) syncInventory(ctx context.Context) error {
	is, ok := r.store.(InventoryStore)
	if !ok {
		return nil
	}
	inv, err := is.Inventory(ctx, r.event)
	if errors.Is(err, ErrNoInventory) {
		return nil
	}
	if err != nil {
		return err
	}
	// Figures dated past what a clock's skew explains are not kept: newer
	// ones would be taken for older and shut out until that date.
	ahead := r.opts.Now().Add(InventoryFresh)
	if inv.At.After(ahead) {
		return nil
	}
	if cur := r.inventory.Load(); cur == nil || !inv.At.Before(cur.At) || cur.At.After(ahead) {
		r.inventory.Store(&inv)
	}
	return nil
}

func inventoryKey(event int64) string { return "waitroom:" + hashtag.Event(event) + ":inventory" }

// PublishInventory implements InventoryStore: one JSON value per event,
// expiring when no longer refreshed.
func (r *RedisStore) PublishInventory(ctx context.Context, event int64, inv Inventory) error {
	b, err := json.Marshal(inv)
	if err != nil {
		return fmt.Errorf("publish inventory: %w", err)
	}
	if err := r.rdb.Set(ctx, inventoryKey(event), b, inventoryKeep).Err(); err != nil {
		return unavailable("publish inventory", err)
	}
	return nil
}

// Inventory implements InventoryStore.
func (r *RedisStore) Inventory(ctx context.Context, event int64) (Inventory, error) {
	b, err := r.rdb.Get(ctx, inventoryKey(event)).Bytes()
	switch {
	case errors.Is(err, redis.Nil):
		return Inventory{}, ErrNoInventory
	case err != nil:
		return Inventory{}, unavailable("read inventory", err)
	}
	var inv Inventory
	if err := json.Unmarshal(b, &inv); err != nil {
		return Inventory{}, fmt.Errorf("read inventory: %w", err)
	}
	return inv, nil
}

// PublishInventory implements InventoryStore.
func (m *MemoryStore) PublishInventory(_ context.Context, event int64, inv Inventory) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.event(event).inventory = &inv
	return nil
}

// Inventory implements InventoryStore.
func (m *MemoryStore) Inventory(_ context.Context, event int64) (Inventory, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	inv := m.event(event).inventory
	if inv == nil || m.now().Sub(inv.At) > inventoryKeep {
		return Inventory{}, ErrNoInventory
	}
	return *inv, nil
}

var (
	_ InventoryStore = (*MemoryStore)(nil)
	_ InventoryStore = (*RedisStore)(nil)
)

// deriveHardCap keeps a hard cap derived from the inventory
// (State.HardCapPerRemaining) at the watermark plus k positions per seat
// remaining, from fresh figures, on the node holding the lease. Positions
// past it are answered sold out: they could only be admitted to find
// nothing left.
func (r *Room) deriveHardCap(ctx context.Context) error {
	s := r.State()
	k := s.HardCapPerRemaining
	inv, fresh := r.Inventory()
	if k <= 0 || !fresh || r.opts.Follow {
		return nil
	}
	hardCap := s.Watermark + int64(math.Ceil(k*float64(inv.Remaining)))
	if hardCap == s.HardCap {
		return nil
	}
	lead, err := r.store.Lead(ctx, r.event, "hard_cap", r.opts.PollInterval*9/10)
	if err != nil || !lead {
		return err
	}
	_, err = r.Update(ctx, Change{HardCap: &hardCap, HardCapPerRemaining: &k, Actor: ActorAutopilot,
		Reason: fmt.Sprintf("derived: %d admitted + %g × %d remaining", s.Watermark, k, inv.Remaining)})
	return err
}
