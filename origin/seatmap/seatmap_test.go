package seatmap_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/origin/seatmap"
)

func stadium() seatmap.Map {
	return seatmap.Map{Sections: []seatmap.Section{
		{ID: "A", Price: 120000, Rows: []seatmap.Row{{ID: "1", Seats: 6}, {ID: "2", Seats: 6}}},
		{ID: "B", Price: 80000, Rows: []seatmap.Row{{ID: "1", Seats: 3}}},
	}}
}

func TestValidate(t *testing.T) {
	ok := stadium()
	require.NoError(t, ok.Validate())
	for name, m := range map[string]seatmap.Map{
		"no sections":     {},
		"bad section id":  {Sections: []seatmap.Section{{ID: "A-1", Rows: []seatmap.Row{{ID: "1", Seats: 1}}}}},
		"twice":           {Sections: []seatmap.Section{{ID: "A", Rows: []seatmap.Row{{ID: "1", Seats: 1}}}, {ID: "A", Rows: []seatmap.Row{{ID: "1", Seats: 1}}}}},
		"no rows":         {Sections: []seatmap.Section{{ID: "A"}}},
		"empty row":       {Sections: []seatmap.Section{{ID: "A", Rows: []seatmap.Row{{ID: "1"}}}}},
		"row twice":       {Sections: []seatmap.Section{{ID: "A", Rows: []seatmap.Row{{ID: "1", Seats: 1}, {ID: "1", Seats: 2}}}}},
		"negative price":  {Sections: []seatmap.Section{{ID: "A", Price: -1, Rows: []seatmap.Row{{ID: "1", Seats: 1}}}}},
		"row id with '-'": {Sections: []seatmap.Section{{ID: "A", Rows: []seatmap.Row{{ID: "1-2", Seats: 1}}}}},
	} {
		assert.Error(t, m.Validate(), name)
	}
}

func TestValidateJSON(t *testing.T) {
	for body, bad := range map[string]bool{
		`{"sections":[{"id":"A","price":0,"rows":[{"id":"1","seats":3}]}]}`:                                       false,
		`{"sections":[{"id":"A","price":1,"rows":[{"id":"1","seats":3}]},{"id":"A-1","price":1,"capacity":5}]}`:   false,
		`{"sections":[{"id":"GA-East","price":1,"capacity":5}]}`:                                                  false,
		`{"sections":[{"id":"A","rows":[{"id":"1","seats":3}]}]}`:                                                 true,
		`{"sections":[{"id":"GA-East","capacity":5}]}`:                                                            true,
		`{"sections":[{"id":"A","price":1,"capacity":0,"rows":[{"id":"1","seats":3}]}]}`:                          true,
		`{"sections":[{"id":"A","price":1,"capacity":0}]}`:                                                        true,
		`{"sections":[{"id":"A","price":1,"rows":[{"id":"1","seats":3}]},{"id":"A-1-2","price":1,"capacity":5}]}`: true,
	} {
		var m seatmap.Map
		require.NoError(t, json.Unmarshal([]byte(body), &m), body)
		if err := m.Validate(); bad {
			assert.Error(t, err, body)
		} else {
			assert.NoError(t, err, body)
		}
	}
	for _, body := range []string{
		`{"sections":[{"id":"A","price":1,"prize":2,"rows":[{"id":"1","seats":3}]}]}`,
		`{"sections":[{"id":"A","price":1,"rows":[{"id":"1","seats":3,"aisle":true}]}]}`,
	} {
		var m seatmap.Map
		assert.Error(t, json.Unmarshal([]byte(body), &m), "unknown field: %s", body)
	}

	// A valid map comes back from its JSON as it was.
	ok := stadium()
	ok.Sections = append(ok.Sections, seatmap.Section{ID: "GA-East", Price: 4500, Capacity: 10})
	raw, err := json.Marshal(ok)
	require.NoError(t, err)
	var back seatmap.Map
	require.NoError(t, json.Unmarshal(raw, &back))
	assert.Equal(t, ok, back)
	assert.NoError(t, back.Validate())
}

func TestSeatsAndLocate(t *testing.T) {
	m := stadium()
	seats := m.Seats()
	require.Len(t, seats, 15)
	assert.Equal(t, int64(15), m.Capacity())
	assert.Equal(t, seatmap.Seat{ID: "A-2-1", Section: "A", Row: "2", N: 1, Ordinal: 7}, seats[6])
	assert.Equal(t, "B-1-3", seats[14].ID)
	assert.Equal(t, int64(80000), m.MinPrice())

	for _, id := range []string{"A-1-0", "A-1-7", "C-1-1", "A-3-1", "A-1-01", "A1-1", ""} {
		_, _, _, ok := m.Locate(id)
		assert.False(t, ok, id)
	}
	p, ok := m.Price([]string{"A-1-1", "B-1-3"})
	assert.True(t, ok)
	assert.Equal(t, int64(200000), p)
}

func takenOf(ids ...string) func(string) bool {
	set := map[string]bool{}
	for _, id := range ids {
		set[id] = true
	}
	return func(id string) bool { return set[id] }
}

func TestBest(t *testing.T) {
	m := stadium()
	for _, tc := range []struct {
		name    string
		taken   []string
		n       int
		want    []string
		wantNil bool
	}{
		{name: "middle of the first row", n: 2, want: []string{"A-1-3", "A-1-4"}},
		{name: "four together, centred", n: 4, want: []string{"A-1-2", "A-1-3", "A-1-4", "A-1-5"}},
		{name: "first row broken up, second row together", n: 3, taken: []string{"A-1-3", "A-1-5"},
			want: []string{"A-2-2", "A-2-3", "A-2-4"}},
		{name: "no row has them together: the narrowest group", n: 3,
			taken: []string{"A-1-2", "A-1-5", "A-2-2", "A-2-3", "A-2-5"},
			want:  []string{"A-1-1", "A-1-3", "A-1-4"}},
		{name: "across the fewest rows", n: 4,
			taken: []string{"A-1-1", "A-1-2", "A-1-3", "A-2-1", "A-2-2", "A-2-3"},
			want:  []string{"A-1-4", "A-1-5", "A-1-6", "A-2-4"}},
		{name: "fewer free than asked", n: 4, taken: []string{"B-1-1"}, wantNil: true},
	} {
		section := "A"
		if tc.wantNil {
			section = "B"
		}
		got, _ := m.Best(section, tc.n, takenOf(tc.taken...))
		if tc.wantNil {
			assert.Nil(t, got, tc.name)
			continue
		}
		assert.Equal(t, tc.want, got, tc.name)
	}
	_, free := m.Best("B", 4, takenOf("B-1-1"))
	assert.Equal(t, 2, free)
	got, _ := m.Best("nope", 1, takenOf())
	assert.Nil(t, got)
}
