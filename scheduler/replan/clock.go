package replan

import "time"

// Clock is the time the monitor and the controller run on: the system clock in
// production, a fake one in tests.
type Clock interface {
	Now() time.Time
	// Tick returns a channel that receives the time every d, and a function
	// that stops it.
	Tick(d time.Duration) (<-chan time.Time, func())
}

// SystemClock is the wall clock.
type SystemClock struct{}

var _ Clock = SystemClock{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// Tick returns a time.Ticker's channel and its Stop.
func (SystemClock) Tick(d time.Duration) (<-chan time.Time, func()) {
	t := time.NewTicker(d)
	return t.C, t.Stop
}
