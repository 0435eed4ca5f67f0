package report

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestTable(t *testing.T) {
	tb := Table{Header: []string{"strategy", "capacity", "sold"}}
	tb.Add("naive", 100, 500)
	tb.Add("atomicRedis", 100, 100)
	var b bytes.Buffer
	tb.Write(&b)
	assert.Equal(t, ""+
		"strategy      capacity   sold\n"+
		"-----------------------------\n"+
		"naive              100    500\n"+
		"atomicRedis        100    100\n", b.String())
}

func TestFormats(t *testing.T) {
	tests := []struct{ got, want string }{
		{Count(0), "0"},
		{Count(999), "999"},
		{Count(1000), "1,000"},
		{Count(int64(-1234567)), "-1,234,567"},
		{Seconds(3520 * time.Millisecond), "3.52s"},
		{Millis(1500 * time.Microsecond), "1.50 ms"},
		{Millis(250 * time.Millisecond), "250 ms"},
		{Percent(1, 3), "33.3%"},
		{Percent(1, 0), "–"},
		{Rate(3559.6), "3,560"},
	}
	for _, tc := range tests {
		assert.Equal(t, tc.want, tc.got)
	}
}
