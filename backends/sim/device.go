package sim

import (
	"context"
	"sync"
)

// device is the one set of lanes of the emulated device, shared by every model
// loaded on it: placement packs several modules' fractional machines onto one
// device (placement.Place), and their batches contend for it. It has
// as many lanes as the largest concurrency any model was loaded with; a batch
// holds one lane of its model (at most that model's concurrency run at once)
// and one lane of the device. Waiters are served first come, first served.
//
// We keep our own semaphore rather than a library's (golang.org/x/sync/semaphore
// cannot grow its size when a model with more lanes is loaded) and it is a few
// lines.
type device struct {
	mu      sync.Mutex
	size    int
	busy    int
	waiting []chan struct{} // FIFO; a closed channel has been handed a lane
}

// grow makes the device have at least n lanes, handing new ones to waiters.
func (d *device) grow(n int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if n > d.size {
		d.size = n
		d.handOff()
	}
}

// handOff gives free lanes to the first waiters. d.mu is held.
func (d *device) handOff() {
	for d.busy < d.size && len(d.waiting) > 0 {
		c := d.waiting[0]
		d.waiting = d.waiting[1:]
		d.busy++
		close(c)
	}
}

// acquire takes a lane, waiting behind earlier callers, or returns ctx's error.
func (d *device) acquire(ctx context.Context) error {
	d.mu.Lock()
	if d.busy < d.size && len(d.waiting) == 0 {
		d.busy++
		d.mu.Unlock()
		return nil
	}
	c := make(chan struct{})
	d.waiting = append(d.waiting, c)
	d.mu.Unlock()
	select {
	case <-c:
		return nil
	case <-ctx.Done():
		d.mu.Lock()
		defer d.mu.Unlock()
		for i, w := range d.waiting {
			if w == c {
				d.waiting = append(d.waiting[:i], d.waiting[i+1:]...)
				return ctx.Err()
			}
		}
		// Handed a lane as ctx ended: give it back.
		d.busy--
		d.handOff()
		return ctx.Err()
	}
}

// release frees a lane.
func (d *device) release() {
	d.mu.Lock()
	d.busy--
	d.handOff()
	d.mu.Unlock()
}
