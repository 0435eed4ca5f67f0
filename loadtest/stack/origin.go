package stack

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"time"

	"github.com/waitroom/waitroom/internal/freeport"
)

// OriginConfig is an origin to start (configured as API.md section 6 says).
type OriginConfig struct {
	Bin         string
	Dir         string
	DatabaseURL string
	RedisURL    string
	// Keys is WAITROOM_KEYS: "kid:secret[,kid:secret…]".
	Keys          string
	AdminToken    string
	WebhookSecret string
	TicketKey     string
	// Env is added last, so it may override the above (e.g. the reaper's
	// interval or fakepay's behaviour).
	Env []string
	// Port is the loopback port to listen on, MetricsPort the metrics';
	// 0: a free one.
	Port, MetricsPort int
}

// Origin is a running origin.
type Origin struct {
	*Proc
	URL string
	// MetricsURL serves its /metrics, apart from the API.
	MetricsURL string
}

// StartOrigin runs the origin on a free port and waits until /readyz
// answers 200 (Redis and Postgres reachable, migrations applied).
func StartOrigin(ctx context.Context, cfg OriginConfig) (*Origin, error) {
	port := cfg.Port
	if port == 0 {
		var err error
		if port, err = freeport.Take(); err != nil {
			return nil, err
		}
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	metricsPort := cfg.MetricsPort
	if metricsPort == 0 {
		var err error
		if metricsPort, err = freeport.Take(); err != nil {
			return nil, err
		}
	}
	metrics := fmt.Sprintf("127.0.0.1:%d", metricsPort)
	env := []string{
		"ORIGIN_ADDR=" + addr,
		"ORIGIN_METRICS_ADDR=" + metrics,
		"DATABASE_URL=" + cfg.DatabaseURL,
		"REDIS_URL=" + cfg.RedisURL,
		"WAITROOM_KEYS=" + cfg.Keys,
		"ORIGIN_ADMIN_TOKEN=" + cfg.AdminToken,
		"PAYMENT_PROVIDER=fakepay",
		"FAKEPAY_WEBHOOK_SECRET=" + cfg.WebhookSecret,
		"TICKET_KEY=" + cfg.TicketKey,
	}
	env = append(env, cfg.Env...)
	p, err := StartProc("origin", cfg.Bin, nil, env, filepath.Join(cfg.Dir, "origin.log"))
	if err != nil {
		return nil, err
	}
	o := &Origin{Proc: p, URL: "http://" + addr, MetricsURL: "http://" + metrics}
	client := &http.Client{Timeout: time.Second}
	err = waitUntil(ctx, p, 60*time.Second, func(ctx context.Context) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, o.URL+"/readyz", nil)
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/readyz answered %d", resp.StatusCode)
		}
		return nil
	})
	if err != nil {
		_ = p.Stop(5 * time.Second)
		return nil, fmt.Errorf("origin: %w", err)
	}
	return o, nil
}
