package stack

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"text/template"
	"time"

	"github.com/waitroom/waitroom/internal/freeport"
)

// Site is one site of a generated Caddyfile, on its own loopback port.
type Site struct {
	Port int
	// Waitroom guards the site when set.
	Waitroom *Waitroom
	// Upstream is the reverse_proxy target; without one the site answers
	// Respond itself.
	Upstream string
	Respond  string
	// Header is set on every answer by Caddy's own header directive, a
	// field once per value.
	Header http.Header
	// HeaderUp is set on every request passed to Upstream (reverse_proxy's
	// header_up), a field once per value.
	HeaderUp http.Header
}

// URL is the site's base URL.
func (s Site) URL() string { return fmt.Sprintf("http://127.0.0.1:%d", s.Port) }

// Waitroom is the waitroom directive of a Site.
type Waitroom struct {
	Event     int64
	Store     string // "memory" or a redis:// URL
	Watermark int64
	HardCap   int64
	Lease     int64
	// Autopilot, when set, raises the watermark.
	Autopilot *Autopilot
	// AbandonAfter is abandon_after; 0: the gateway's default.
	AbandonAfter time.Duration
}

// Autopilot is the waitroom's autopilot: Step every Interval (a fixed
// rate), or the closed loop, with its subdirectives (zero: the gateway's
// defaults).
type Autopilot struct {
	Step     int64
	Interval time.Duration

	ClosedLoop   bool
	MaxUndecided int64
	DecisionTime time.Duration
}

// CaddyConfig is a Caddy to start from a generated Caddyfile.
type CaddyConfig struct {
	Bin   string
	Dir   string
	KeyID string
	// Secret signs queue tokens; passed in the environment, never written
	// to the Caddyfile.
	Secret string
	Sites  []Site
	// Caddyfile, when set, is run instead of one made from Sites (which
	// then only name the ports to wait for), with Env added to Caddy's
	// environment and the admin endpoint on AdminPort.
	Caddyfile string
	Env       []string
	AdminPort int
}

// Caddy is a running Caddy.
type Caddy struct {
	*Proc
	// AdminURL is Caddy's admin endpoint.
	AdminURL string
	Sites    []Site
}

var caddyfileTemplate = template.Must(template.New("Caddyfile").Funcs(template.FuncMap{"quote": caddyfileQuote}).Parse(`{
	admin 127.0.0.1:{{.AdminPort}}
	auto_https off
	persist_config off
	grace_period 2s
}
{{range .Sites}}
http://127.0.0.1:{{.Port}} {
	bind 127.0.0.1
{{- with .Waitroom}}
	waitroom {
		event {{.Event}}
		key {{$.KeyID}} {env.WAITROOM_SECRET}
		store {{.Store}}
		watermark {{.Watermark}}
{{- if .HardCap}}
		hard_cap {{.HardCap}}
{{- end}}
{{- if .Lease}}
		lease {{.Lease}}
{{- end}}
{{- if .AbandonAfter}}
		abandon_after {{.AbandonAfter}}
{{- end}}
{{- with .Autopilot}}
{{- if .ClosedLoop}}
		autopilot {
{{- if .Interval}}
			interval {{.Interval}}
{{- end}}
{{- if .MaxUndecided}}
			max_undecided {{.MaxUndecided}}
{{- end}}
{{- if .DecisionTime}}
			decision_time {{.DecisionTime}}
{{- end}}
		}
{{- else}}
		autopilot {{.Step}} {{.Interval}}
{{- end}}
{{- end}}
	}
{{- end}}
{{- with .Header}}
	header {
{{- range $name, $values := .}}{{range $values}}
		+{{$name}} {{quote .}}
{{- end}}{{end}}
	}
{{- end}}
{{- if .Upstream}}
	reverse_proxy {{.Upstream}}{{with .HeaderUp}} {
{{- range $name, $values := .}}{{range $values}}
		header_up +{{$name}} {{quote .}}
{{- end}}{{end}}
	}{{end}}
{{- else}}
	respond ` + "`{{.Respond}}`" + ` 200
{{- end}}
}
{{end}}`))

// caddyfileQuote is s as one Caddyfile token: in double quotes, with the
// quote and the backslash escaped.
func caddyfileQuote(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}

// WriteCaddyfile renders cfg's Caddyfile to path.
func WriteCaddyfile(path string, cfg CaddyConfig, adminPort int) error {
	var b strings.Builder
	err := caddyfileTemplate.Execute(&b, struct {
		CaddyConfig
		AdminPort int
	}{cfg, adminPort})
	if err != nil {
		return fmt.Errorf("render Caddyfile: %w", err)
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// StartCaddy writes the Caddyfile into cfg.Dir, runs Caddy on it and waits
// until the admin endpoint and every site answer.
func StartCaddy(ctx context.Context, cfg CaddyConfig) (*Caddy, error) {
	adminPort, path := cfg.AdminPort, cfg.Caddyfile
	if path == "" {
		var err error
		if adminPort, err = freeport.Take(); err != nil {
			return nil, err
		}
		path = filepath.Join(cfg.Dir, "Caddyfile")
		if err := WriteCaddyfile(path, cfg, adminPort); err != nil {
			return nil, err
		}
	}
	p, err := StartProc("caddy", cfg.Bin, []string{"run", "--config", path, "--adapter", "caddyfile"},
		append([]string{
			"WAITROOM_SECRET=" + cfg.Secret,
			// Caddy's state (autosave, certificates) stays in the run's folder.
			"XDG_DATA_HOME=" + filepath.Join(cfg.Dir, "caddy-data"),
			"XDG_CONFIG_HOME=" + filepath.Join(cfg.Dir, "caddy-config"),
		}, cfg.Env...), filepath.Join(cfg.Dir, "caddy.log"))
	if err != nil {
		return nil, err
	}
	c := &Caddy{Proc: p, AdminURL: fmt.Sprintf("http://127.0.0.1:%d", adminPort), Sites: cfg.Sites}
	if cfg.Caddyfile != "" {
		// A Caddyfile of its own names its admin localhost, and Caddy
		// answers only the hosts its admin allows.
		c.AdminURL = fmt.Sprintf("http://localhost:%d", adminPort)
	}
	client := &http.Client{Timeout: time.Second}
	err = waitUntil(ctx, p, 30*time.Second, func(ctx context.Context) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.AdminURL+"/config/", nil)
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("admin endpoint answered %d", resp.StatusCode)
		}
		for _, s := range cfg.Sites {
			conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", s.Port), time.Second)
			if err != nil {
				return err
			}
			conn.Close()
		}
		return nil
	})
	if err != nil {
		_ = p.Stop(5 * time.Second)
		return nil, fmt.Errorf("caddy: %w", err)
	}
	return c, nil
}
