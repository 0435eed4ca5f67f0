package hashtag_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/waitroom/waitroom/hashtag"
)

func TestEvent(t *testing.T) {
	for _, tc := range []struct {
		event int64
		want  string
	}{{1, "{evt:1}"}, {42, "{evt:42}"}, {1 << 50, "{evt:1125899906842624}"}} {
		assert.Equal(t, tc.want, hashtag.Event(tc.event))
	}
}
