package outbox_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/waitroom/waitroom/origin/outbox"
)

func TestVerify(t *testing.T) {
	now := time.Unix(1_780_000_000, 0)
	body := []byte(`{"id":"evt_1","type":"booking.confirmed","created":1780000000,"data":{}}`)
	signed := outbox.Sign(secret, now, body)
	for _, tt := range []struct {
		name   string
		header string
		body   string
		secret string
		at     time.Time
		want   error
	}{
		{name: "valid", header: signed, at: now},
		{name: "valid, within tolerance", header: signed, at: now.Add(outbox.DefaultTolerance)},
		{name: "one of several v1", header: "t=1780000000,v1=00," + signed[len("t=1780000000,"):], at: now},
		{name: "wrong secret", header: signed, secret: "whsec_other_secret", at: now, want: outbox.ErrBadSignature},
		{name: "tampered body", header: signed, body: `{"id":"evt_2"}`, at: now, want: outbox.ErrBadSignature},
		{name: "too old", header: signed, at: now.Add(outbox.DefaultTolerance + time.Second), want: outbox.ErrSignatureAge},
		{name: "from the future", header: signed, at: now.Add(-outbox.DefaultTolerance - time.Second), want: outbox.ErrSignatureAge},
		{name: "no header", header: "", at: now, want: outbox.ErrNoSignature},
		{name: "no v1", header: "t=1780000000", at: now, want: outbox.ErrNoSignature},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b, s := body, secret
			if tt.body != "" {
				b = []byte(tt.body)
			}
			if tt.secret != "" {
				s = []byte(tt.secret)
			}
			err := outbox.Verify(tt.header, b, s, tt.at, outbox.DefaultTolerance)
			if tt.want == nil {
				assert.NoError(t, err)
			} else {
				assert.ErrorIs(t, err, tt.want)
			}
		})
	}
}
