package waitroom

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A key's check is HMAC-SHA256 of a fixed message, cut to 16 bytes: the
// value the Worker computes from its own secret (edge/cloudflare/worker/src/token.js) and
// compares. This one is openssl's:
//
//	echo -n "waitroom edge key check" | openssl dgst -sha256 -hmac "an-example-secret-of-at-least-32-bytes"
func TestKeyCheck(t *testing.T) {
	assert.Equal(t, "9f422e85df0d24d6a21f85c2c66a716a", KeyCheck([]byte("an-example-secret-of-at-least-32-bytes")))
	assert.NotEqual(t, KeyCheck([]byte("an-example-secret-of-at-least-32-bytes")),
		KeyCheck([]byte("an-example-secret-of-at-least-32-byteZ")))
}

func TestKeySetChecks(t *testing.T) {
	ks, err := NewKeySet(nil, Key{ID: "k2", Secret: secretB}, Key{ID: "k1", Secret: secretA})
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"k1": KeyCheck(secretA), "k2": KeyCheck(secretB)}, ks.Checks())
}
