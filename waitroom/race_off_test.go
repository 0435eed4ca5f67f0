//go:build !race

package waitroom

const raceEnabled = false
