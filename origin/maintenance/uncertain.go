package maintenance

import (
	"context"
	"log/slog"
	"time"

	"github.com/waitroom/waitroom/origin/seats"
)

// UncertainResolverConfig configures the UncertainResolver.
type UncertainResolverConfig struct {
	// Interval is how often the writes given up on are looked at; default
	// 1 s.
	Interval time.Duration
	// Logger; default discards.
	Logger *slog.Logger
}

// UncertainResolver settles the hold writes whose outcome was unknown once
// they are final: the seats of a row that never went in go back.
type UncertainResolver struct {
	seats *seats.Protocol
	loop  loop
}

// NewUncertainResolver returns a resolver over p.
func NewUncertainResolver(cfg UncertainResolverConfig, p *seats.Protocol) *UncertainResolver {
	u := &UncertainResolver{seats: p}
	u.loop = loop{name: "uncertain hold check", interval: orDefault(cfg.Interval, time.Second), log: logger(cfg.Logger),
		pass: func(ctx context.Context) error { _, err := u.RunOnce(ctx); return err }}
	return u
}

// Start runs the resolver until ctx ends or Stop is called.
func (u *UncertainResolver) Start(ctx context.Context) { u.loop.start(ctx) }

// Stop stops the resolver and waits for its pass under way.
func (u *UncertainResolver) Stop() { u.loop.stop() }

// RunOnce settles the writes that are final and returns how many.
func (u *UncertainResolver) RunOnce(ctx context.Context) (int, error) {
	return u.seats.Releases().ResolveUncertain(ctx)
}
