package sim

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The booking answers an Idempotency-Key gets, held to its first use: only
// a key that made a booking (202) is kept for good, in the booking's row;
// a 200 naming a booking made with another key lives only in Redis and may
// be forgotten with it (docs/api.md §8).
func TestBookKeyCheck(t *testing.T) {
	type use struct {
		body   string
		status int
		id     string
	}
	tests := []struct {
		name    string
		answers []use
		broken  string // the last answer's violation, "" if none
	}{
		{"a replay gets the same booking",
			[]use{{"h visa", 202, "b1"}, {"h visa", 202, "b1"}}, ""},
		{"a replay makes a second booking",
			[]use{{"h visa", 202, "b1"}, {"h visa", 202, "b2"}}, "replayed made a second booking"},
		{"a key that made a booking, with another body, makes another",
			[]use{{"h fail", 202, "b1"}, {"h visa", 202, "b2"}}, "made another booking"},
		{"a 200 forgotten with Redis, the same body, makes a booking once the first failed",
			[]use{{"h fail", 200, "b1"}, {"h fail", 202, "b2"}}, ""},
		{"a 200 forgotten with Redis, another body, makes a booking once the first failed",
			[]use{{"h fail", 200, "b1"}, {"h visa", 202, "b2"}}, ""},
		{"a 200, then a booking made with the key, then another body makes another",
			[]use{{"h fail", 200, "b1"}, {"h visa", 202, "b2"}, {"h fail", 202, "b3"}}, "made another booking"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			keys := map[string]keyUse{}
			var v *violation
			for i, a := range tt.answers {
				v = bookKeyCheck(keys, "k", a.body, a.status, a.id)
				if i < len(tt.answers)-1 {
					require.Nil(t, v, "answer %d", i)
				}
			}
			if tt.broken == "" {
				assert.Nil(t, v)
				return
			}
			require.NotNil(t, v)
			assert.Equal(t, "idempotency", v.check)
			assert.Contains(t, v.msg, tt.broken)
		})
	}
}
