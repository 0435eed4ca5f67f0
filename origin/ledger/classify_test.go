package ledger

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/testenv"
)

// A connection that breaks once a COMMIT or a batch of hold rows went out
// may have let them run: the write is uncertain, whatever pgx says of
// retrying it. (After a COMMIT it reports the break as "conn closed", which
// it calls safe to retry; after a batch, as the read's own error.)
func TestWriteCutAfterSendIsUncertain(t *testing.T) {
	dbURL, proxy := testenv.Proxied(t, testenv.Postgres(t))
	// One connection: the batch's statements are prepared on it by the
	// first write, so the second sends only the batch.
	l, err := Open(context.Background(), dbURL, Options{MaxConns: 1})
	require.NoError(t, err)
	t.Cleanup(l.Close)
	ctx := context.Background()
	// cutAtNext cuts every connection at the next bytes sent that contain
	// marker (nil: any), before they reach the server.
	cutAtNext := func(marker []byte) {
		proxy.OnSend(func(b []byte) {
			if bytes.Contains(b, marker) {
				proxy.OnSend(nil)
				proxy.Cut()
			}
		})
		t.Cleanup(func() { proxy.OnSend(nil); proxy.Restore() })
	}

	t.Run("commit", func(t *testing.T) {
		cutAtNext([]byte("commit"))
		err := l.InTx(ctx, time.Time{}, func(tx Tx) error {
			_, err := tx.tx.Exec(ctx, "SELECT 1")
			return err
		})
		require.Error(t, err)
		assert.ErrorIs(t, err, ErrUncertain)
		proxy.Restore()
	})

	t.Run("batch of holds", func(t *testing.T) {
		ev := confirmEvent(t, l, 10).ID
		_, outcome, err := l.InsertHolds(ctx, []Hold{pendingRow(ev, "ann", "a")}, []*time.Time{nil})
		require.NoError(t, err)
		require.Equal(t, WriteDone, outcome)
		cutAtNext(nil)
		_, outcome, err = l.InsertHolds(ctx, []Hold{pendingRow(ev, "bob", "b")}, []*time.Time{nil})
		require.Error(t, err)
		assert.Equal(t, WriteUncertain, outcome, "%v", err)
		proxy.Restore()
	})
}
