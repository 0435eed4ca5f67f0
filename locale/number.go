package locale

import (
	"math"
	"strconv"
	"strings"

	"golang.org/x/text/message"
)

// grouping is how a language writes integers when they are ASCII digits
// grouped by threes with an ASCII minus: the separator, and the fewest
// digits it groups (4, or 5 where a lone thousand stays whole, as in
// Spanish and Polish). The printer's Sprint costs a formatting state and
// its verbs on every call; the waiting page writes two numbers per poll.
type grouping struct {
	sep string
	min int
	ok  bool
}

// groupingOf reads p's grouping from how it writes 1234567 and 1234, and
// keeps it only if it then writes every probe as p does. Any other way of
// writing numbers (Hindi's lakh grouping, Arabic-Indic digits, a minus
// sign that is not ASCII) is left to the printer.
func groupingOf(p *message.Printer) grouping {
	s := p.Sprint(int64(1234567))
	if len(s) < 7 || s[0] != '1' || !strings.HasSuffix(s, "567") {
		return grouping{}
	}
	mid := s[1 : len(s)-3] // sep + "234" + sep
	if (len(mid)-3)%2 != 0 {
		return grouping{}
	}
	n := (len(mid) - 3) / 2
	g := grouping{sep: mid[:n], min: 4, ok: true}
	if mid != g.sep+"234"+g.sep {
		return grouping{}
	}
	if p.Sprint(int64(1234)) == "1234" {
		g.min = 5
	}
	for _, n := range numberProbes() {
		if string(g.append(nil, n)) != p.Sprint(n) {
			return grouping{}
		}
	}
	return g
}

// numberProbes are the integers a grouping must write as its printer
// does: both ends, and every length with its edges.
func numberProbes() []int64 {
	ns := []int64{0, -1, -1234, -12345, math.MinInt64, math.MaxInt64}
	for n := int64(1); n < math.MaxInt64/10; n *= 10 {
		ns = append(ns, n, n-1, n+1, 12*n+3, -n)
	}
	return ns
}

// append writes n to b with g's separator between groups of three.
func (g grouping) append(b []byte, n int64) []byte {
	var d [20]byte
	digits := strconv.AppendInt(d[:0], n, 10)
	if digits[0] == '-' {
		b = append(b, '-')
		digits = digits[1:]
	}
	if g.sep == "" || len(digits) < g.min {
		return append(b, digits...)
	}
	first := len(digits) % 3
	if first == 0 {
		first = 3
	}
	b = append(b, digits[:first]...)
	for i := first; i < len(digits); i += 3 {
		b = append(b, g.sep...)
		b = append(b, digits[i:i+3]...)
	}
	return b
}
