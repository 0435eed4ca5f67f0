package ledger

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"regexp"
	"slices"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// A small runner rather than golang-migrate: the ledger needs only "apply
// the new files in order, each in its own transaction, under an advisory
// lock". Postgres DDL is transactional, so a failed migration leaves nothing
// behind and no "dirty" version to repair by hand; one statement run per
// file keeps the dependency tree (and its drivers) out of the origin.
//
//go:embed migrations/*.up.sql
var migrationFiles embed.FS

// migrationLock is the advisory lock key taken while migrating, so origin
// nodes starting together apply each migration once.
const migrationLock int64 = 0x77616974726f6f6d // "waitroom"

var migrationName = regexp.MustCompile(`^(\d{3})_([a-z0-9_]+)\.up\.sql$`)

type migration struct {
	version int
	name    string
	sql     string
}

func loadMigrations() ([]migration, error) {
	entries, err := fs.ReadDir(migrationFiles, "migrations")
	if err != nil {
		return nil, fmt.Errorf("read migrations: %w", err)
	}
	var out []migration
	for _, e := range entries {
		m := migrationName.FindStringSubmatch(e.Name())
		if m == nil {
			return nil, fmt.Errorf("migration %q: name must be NNN_name.up.sql", e.Name())
		}
		v, _ := strconv.Atoi(m[1])
		body, err := fs.ReadFile(migrationFiles, "migrations/"+e.Name())
		if err != nil {
			return nil, fmt.Errorf("read migration %s: %w", e.Name(), err)
		}
		out = append(out, migration{version: v, name: m[2], sql: string(body)})
	}
	slices.SortFunc(out, func(a, b migration) int { return a.version - b.version })
	for i := 1; i < len(out); i++ {
		if out[i].version == out[i-1].version {
			return nil, fmt.Errorf("migrations %s and %s share version %d", out[i-1].name, out[i].name, out[i].version)
		}
	}
	return out, nil
}

// migrate applies the migrations the database has not seen yet.
func migrate(ctx context.Context, pool *pgxpool.Pool) error {
	all, err := loadMigrations()
	if err != nil {
		return err
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("migrate: acquire connection: %w", err)
	}
	defer conn.Release()
	// Migrations may wait for the lock or build indexes for longer than the
	// request path's statement timeout allows.
	if _, err := conn.Exec(ctx, sqlMigrateNoTimeout); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer func() { _, _ = conn.Exec(context.WithoutCancel(ctx), sqlMigrateResetTimeout) }()
	if _, err := conn.Exec(ctx, sqlMigrateLock, migrationLock); err != nil {
		return fmt.Errorf("migrate: take advisory lock: %w", err)
	}
	defer func() { _, _ = conn.Exec(context.WithoutCancel(ctx), sqlMigrateUnlock, migrationLock) }()

	if _, err := conn.Exec(ctx, sqlMigrationsTable); err != nil {
		return fmt.Errorf("migrate: create schema_migrations: %w", err)
	}
	rows, _ := conn.Query(ctx, sqlAppliedMigrations)
	applied, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		return fmt.Errorf("migrate: read applied versions: %w", err)
	}
	for _, m := range all {
		if slices.Contains(applied, m.version) {
			continue
		}
		err := pgx.BeginTxFunc(ctx, conn, pgx.TxOptions{}, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, m.sql); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, sqlRecordMigration, m.version, m.name)
			return err
		})
		if err != nil {
			return fmt.Errorf("migrate: apply %03d_%s: %w", m.version, m.name, err)
		}
	}
	return nil
}
