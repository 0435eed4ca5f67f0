package waitroom

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
)

// keyCheckMessage is what KeyCheck signs. The edge Worker signs the same
// (edge/cloudflare/worker/src/token.js): the message is part of the
// published key checks' contract.
const keyCheckMessage = "waitroom edge key check"

// KeyCheck tells a secret apart from another without telling it: the first
// 16 bytes of HMAC-SHA256(secret, keyCheckMessage), in hex. It is no more a
// clue to the secret than any token the secret signed. Whoever holds keys
// (a gateway, the edge, the origin) compares checks to find a secret that
// differs under one key id.
func KeyCheck(secret []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(keyCheckMessage))
	return hex.EncodeToString(m.Sum(nil)[:16])
}

// Checks is KeyCheck of each key's secret, by key id.
func (ks *KeySet) Checks() map[string]string {
	out := make(map[string]string, len(ks.keys))
	for _, k := range ks.keys {
		out[k.ID] = KeyCheck(k.Secret)
	}
	return out
}
