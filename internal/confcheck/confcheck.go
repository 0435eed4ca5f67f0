// Package confcheck holds the checks of configuration values that more
// than one part of the product takes: a value that parses but can never
// work would otherwise show only later, as every call or event failing.
package confcheck

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"unicode"
)

// HTTPURL reports whether raw is a URL requests can be sent to: http or
// https, a host, a port if any from 1 to 65535, nothing around it. A URL
// that parses but can never answer (a trailing space sent as %20, a port
// no one listens on) would only show as every request failing.
func HTTPURL(raw string) error {
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return err
	case u.Scheme != "http" && u.Scheme != "https":
		return errors.New("an http or https URL is required")
	case u.Hostname() == "":
		return errors.New("a host is required")
	case strings.ContainsFunc(raw, unicode.IsSpace):
		return errors.New("whitespace in it or around it")
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("port %q is not 1 to 65535", p)
		}
	}
	return nil
}

// Secret reports whether v can be taken as a secret as it is: whitespace
// around it (a secret file's trailing newline) or a control character in
// it would make every signature or API call fail.
func Secret(v string) error {
	if v != strings.TrimSpace(v) || strings.ContainsFunc(v, unicode.IsControl) {
		return errors.New("whitespace around it or a control character in it")
	}
	return nil
}
