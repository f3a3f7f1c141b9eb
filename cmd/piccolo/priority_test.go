package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/piccolo-serving/piccolo/metrics"
)

// classRun is what one priority class of an open loop saw.
type classRun struct {
	sent, ok, inSLO, refused, other int
}

func (c classRun) String() string {
	return fmt.Sprintf("sent %d ok %d within SLO %d (%.2f%%) refused %d (%.1f%%) other errors %d",
		c.sent, c.ok, c.inSLO, 100*float64(c.inSLO)/float64(max(c.sent, 1)), c.refused, 100*float64(c.refused)/float64(max(c.sent, 1)), c.other)
}

// TestPriorityUnderOverloadLive: the overload plan (one machine of 200
// req/s, planned at 150 req/s, SLO 1 s) on one sim backend, open loop
// (Poisson) at 4× the planned rate for 3 s: 100 req/s of priority 1 (high)
// and 500 req/s of priority 3 (low). The high class is ≥ 99% within the SLO;
// the low class takes the refusals, and keeps at least its floor (5%) of
// the admitted items.
func TestPriorityUnderOverloadLive(t *testing.T) {
	if testing.Short() {
		t.Skip("a live overload run")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	url := startPool(t, ctx, overloadProfile, 1, onePlan)
	c := &fasthttp.Client{MaxConnsPerHost: 4096, ReadTimeout: 5 * time.Second}
	body := func(priority int) []byte {
		return fmt.Appendf(nil, `{"parameters":{"priority":%d},"inputs":[{"name":"input0","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}]}`, priority)
	}
	post := func(b []byte) (int, time.Duration) {
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		defer fasthttp.ReleaseRequest(req)
		defer fasthttp.ReleaseResponse(resp)
		req.SetRequestURI(url + "/v2/models/one/infer")
		req.Header.SetMethod("POST")
		req.SetBody(b)
		start := time.Now()
		if err := c.Do(req, resp); err != nil {
			return 0, time.Since(start)
		}
		return resp.StatusCode(), time.Since(start)
	}
	for range 50 { // warm up: connections, pools
		post(body(0))
	}
	var mu sync.Mutex
	runs := map[int]*classRun{1: {}, 3: {}}
	var wg sync.WaitGroup
	load := func(priority int, rate float64, d time.Duration, seed uint64) {
		defer wg.Done()
		rng := rand.New(rand.NewPCG(seed, 0))
		b := body(priority)
		start := time.Now()
		next := start
		for next.Sub(start) < d {
			time.Sleep(time.Until(next))
			wg.Add(1)
			go func() {
				defer wg.Done()
				code, took := post(b)
				mu.Lock()
				defer mu.Unlock()
				r := runs[priority]
				r.sent++
				switch {
				case code == 200:
					r.ok++
					if took <= time.Second {
						r.inSLO++
					}
				case code == 429:
					r.refused++
				default:
					r.other++
				}
			}()
			next = next.Add(time.Duration(rng.ExpFloat64() / rate * float64(time.Second)))
		}
	}
	wg.Add(2)
	go load(1, 100, 3*time.Second, 1)
	go load(3, 500, 3*time.Second, 2)
	wg.Wait()
	hi, lo := *runs[1], *runs[3]
	t.Logf("high (priority 1): %v", hi)
	t.Logf("low  (priority 3): %v", lo)
	admittedLo := scrape(t, url, metrics.DispatcherClassItemsTotal, `class="low"`, `outcome="submitted"`)
	admittedHi := scrape(t, url, metrics.DispatcherClassItemsTotal, `class="high"`, `outcome="submitted"`)
	t.Logf("admitted by the dispatcher: high %.0f, low %.0f (%.1f%% of the admitted)", admittedHi, admittedLo, 100*admittedLo/(admittedHi+admittedLo))
	if frac := float64(hi.inSLO) / float64(hi.sent); frac < 0.99 {
		t.Errorf("high class: %.2f%% within the SLO, want ≥ 99%%", 100*frac)
	}
	if lo.refused < lo.sent/2 || hi.refused > lo.refused/20 {
		t.Errorf("refused: high %d of %d, low %d of %d; want the low class to take the refusals", hi.refused, hi.sent, lo.refused, lo.sent)
	}
	if share := admittedLo / (admittedHi + admittedLo); share < 0.05 {
		t.Errorf("low class: %.1f%% of the admitted items, below its floor of 5%%", 100*share)
	}
}
