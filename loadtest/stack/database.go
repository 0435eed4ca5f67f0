package stack

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
)

// Database is a database of our own on the server we are given, so a run's
// tables and write statistics are its alone; Drop removes it.
type Database struct {
	Name string
	// URL reaches the new database on the server.
	URL  string
	base string
}

// CreateDatabase creates a database named prefix_<pid>_<unix ms> on the
// server of baseURL.
func CreateDatabase(ctx context.Context, baseURL, prefix string) (*Database, error) {
	if baseURL == "" {
		return nil, errors.New("DATABASE_URL is not set (scripts/services.sh starts a private PostgreSQL and sets it)")
	}
	conn, err := pgx.Connect(ctx, baseURL)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	defer conn.Close(ctx)
	name := fmt.Sprintf("%s_%d_%d", prefix, os.Getpid(), time.Now().UnixMilli())
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return nil, fmt.Errorf("create database %s: %w", name, err)
	}
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("DATABASE_URL: %w", err)
	}
	u.Path = "/" + name
	return &Database{Name: name, URL: u.String(), base: baseURL}, nil
}

// WithHost is URL with its host:port replaced, e.g. to go through a Proxy.
func (d *Database) WithHost(hostport string) string {
	u, _ := url.Parse(d.URL)
	u.Host = hostport
	return u.String()
}

// Host is the server's host:port.
func (d *Database) Host() string {
	u, _ := url.Parse(d.URL)
	return u.Host
}

// Drop removes the database, closing whatever still uses it.
func (d *Database) Drop(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, d.base)
	if err != nil {
		return fmt.Errorf("drop database %s: %w", d.Name, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{d.Name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop database %s: %w", d.Name, err)
	}
	return nil
}

// Writes is what the server counted for one database: rows written to its
// tables and transactions committed.
type Writes struct {
	Inserted int64 `json:"inserted"`
	Updated  int64 `json:"updated"`
	Deleted  int64 `json:"deleted"`
	Commits  int64 `json:"commits"`
	// Tables is the rows written per table.
	Tables map[string]int64 `json:"tables"`
}

// Rows is every row written.
func (w Writes) Rows() int64 { return w.Inserted + w.Updated + w.Deleted }

// Sub is w − o.
func (w Writes) Sub(o Writes) Writes {
	d := Writes{w.Inserted - o.Inserted, w.Updated - o.Updated, w.Deleted - o.Deleted, w.Commits - o.Commits, map[string]int64{}}
	for t, n := range w.Tables {
		if n != o.Tables[t] {
			d.Tables[t] = n - o.Tables[t]
		}
	}
	return d
}

// ReadWrites reads the statistics views. They lag: each server process
// reports its counts when it goes idle, at most about once a second, so
// SettledWrites waits for them to stop moving.
func (d *Database) ReadWrites(ctx context.Context) (Writes, error) {
	conn, err := pgx.Connect(ctx, d.URL)
	if err != nil {
		return Writes{}, fmt.Errorf("read write statistics: %w", err)
	}
	defer conn.Close(ctx)
	w := Writes{Tables: map[string]int64{}}
	if err := conn.QueryRow(ctx, `SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()`).Scan(&w.Commits); err != nil {
		return Writes{}, fmt.Errorf("read write statistics: %w", err)
	}
	rows, err := conn.Query(ctx, `SELECT relname, n_tup_ins, n_tup_upd, n_tup_del FROM pg_stat_user_tables`)
	if err != nil {
		return Writes{}, fmt.Errorf("read write statistics: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var ins, upd, del int64
		if err := rows.Scan(&name, &ins, &upd, &del); err != nil {
			return Writes{}, fmt.Errorf("read write statistics: %w", err)
		}
		w.Inserted += ins
		w.Updated += upd
		w.Deleted += del
		w.Tables[name] = ins + upd + del
	}
	return w, rows.Err()
}

// SettledWrites reads the statistics until two readings a second and a half
// apart agree on the rows written (at most max), so the counts of server
// processes that were busy a moment ago are in.
func (d *Database) SettledWrites(ctx context.Context, max time.Duration) (Writes, error) {
	deadline := time.Now().Add(max)
	prev, err := d.ReadWrites(ctx)
	if err != nil {
		return Writes{}, err
	}
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return prev, ctx.Err()
		case <-time.After(1500 * time.Millisecond):
		}
		cur, err := d.ReadWrites(ctx)
		if err != nil {
			return Writes{}, err
		}
		if cur.Rows() == prev.Rows() {
			return cur, nil
		}
		prev = cur
	}
	return prev, nil
}
