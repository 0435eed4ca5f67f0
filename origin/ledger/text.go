package ledger

import (
	"strings"
	"unicode/utf8"
)

// IsText reports whether every string is one the ledger's text columns
// store: UTF-8 without NUL, which PostgreSQL refuses in text whatever the
// column. A request that carries anything else is bad input, to be refused
// before it reaches a statement that would fail on it as if the database
// were down.
func IsText(ss ...string) bool {
	for _, s := range ss {
		if !utf8.ValidString(s) || strings.IndexByte(s, 0) >= 0 {
			return false
		}
	}
	return true
}
