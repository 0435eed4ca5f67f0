package waitroom

import "strconv"

// How a queue token travels between the gateway, browsers, API clients and
// the origin: the gateway sets it, the origin reads it, both from here.
const (
	// TokenHeader carries the token of API clients, in requests and in the
	// gateway's answers.
	TokenHeader = "X-Waitroom-Token"
	// CookiePrefix starts the name of every token cookie (CookieName).
	CookiePrefix = "waitroom_"
)

// CookieName is the cookie that carries a browser's token for event.
func CookieName(event int64) string { return CookiePrefix + strconv.FormatInt(event, 10) }
